from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from core.admin import ConflictsAnsweredAdmin
from core.names import form_name
from tenants import console
from tenants.models import ApiKey, RateTier, Scope, Tenant
from tenants.services import create_api_key, revoke_api_key


class ApiKeyForm(forms.ModelForm[ApiKey]):
    """Scopes as checkboxes rather than the array field's comma-separated text."""

    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiKey
        fields = [
            "tenant", "name", "prefix", "key_hash", "expires_at", "revoked_at", "last_used_at", "scopes",
            "principals", "knowledge_base_ids",
        ]  # fmt: skip


class ApiKeyInline(admin.TabularInline[ApiKey, Tenant]):
    model = ApiKey
    form = ApiKeyForm
    extra = 0
    fields = ["name", "prefix", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # keys are issued by create_api_key (API keys > Add, or `manage.py create_api_key`)


class TenantForm(forms.ModelForm[Tenant]):
    class Meta:
        model = Tenant
        fields = "__all__"  # noqa: DJ007  # the admin picks the fields; this form only cleans the name

    def clean_name(self) -> str:
        return form_name(self.cleaned_data["name"])


@admin.register(Tenant)
class TenantAdmin(ConflictsAnsweredAdmin):
    form = TenantForm
    list_display = ["name", "is_active", "rate_tier", "created_at", "dashboard"]
    list_filter = ["rate_tier", "is_active"]
    search_fields = ["name"]
    inlines = [ApiKeyInline]

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.dashboard_view)
        return [path("<int:tenant_id>/dashboard/", view, name="tenants_tenant_dashboard"), *super().get_urls()]

    def dashboard_view(self, request: HttpRequest, tenant_id: int) -> TemplateResponse:
        context = {**self.admin_site.each_context(request), "opts": self.opts}
        return console.dashboard_view(request, context, tenant_id)

    @admin.display(description="Dashboard")
    def dashboard(self, tenant: Tenant) -> str:
        url = reverse("admin:tenants_tenant_dashboard", args=[tenant.pk])
        return format_html('<a href="{}" class="dashboard-link">queries, latency, limits</a>', url)


@admin.register(RateTier)
class RateTierAdmin(ConflictsAnsweredAdmin):
    list_display = ["name", "requests_per_window", "endpoint_limits"]
    search_fields = ["name"]


class ApiKeyCreationForm(forms.ModelForm[ApiKey]):
    """The arguments of ``create_api_key``, which makes the secret."""

    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=["search"])

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "expires_at", "principals", "knowledge_base_ids"]

    def clean_name(self) -> str:
        return form_name(self.cleaned_data["name"], allow_blank=True)

    def create(self) -> ApiKey:
        data = self.cleaned_data
        self.issued = create_api_key(
            tenant=data["tenant"],
            name=data["name"],
            expires_at=data["expires_at"],
            scopes=data["scopes"],
            principals=data["principals"],
            knowledge_base_ids=data["knowledge_base_ids"],
        )
        return self.issued.api_key


@admin.register(ApiKey)
class ApiKeyAdmin(ConflictsAnsweredAdmin):
    """Keys are issued by ``create_api_key`` (the secret is shown once, then only its hash is kept) and
    revoked by ``revoke_api_key``, here as from ``manage.py create_api_key``."""

    form = ApiKeyForm
    add_form = ApiKeyCreationForm
    list_display = [
        "prefix", "tenant", "name", "scopes", "principals", "knowledge_base_ids", "created_at", "expires_at",
        "revoked_at", "last_used_at",
    ]  # fmt: skip
    list_filter = ["tenant"]
    search_fields = ["prefix", "name", "tenant__name"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]
    actions = ["revoke"]

    def get_form(
        self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[ApiKey]]:
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[Any] | tuple[Any, ...]:
        return ApiKeyCreationForm.Meta.fields if obj is None else super().get_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str] | tuple[str, ...]:
        return [] if obj is None else self.readonly_fields

    def save_form(self, request: HttpRequest, form: forms.ModelForm[ApiKey], change: bool) -> ApiKey:
        if change:
            saved: ApiKey = super().save_form(request, form, change)
            return saved
        assert isinstance(form, ApiKeyCreationForm)  # get_form's form for an added key
        api_key = form.create()
        messages.warning(
            request, f"The key {api_key.prefix}'s secret, shown this once (copy it now): {form.issued.raw_key}"
        )
        return api_key

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm[ApiKey], change: bool) -> None:
        if change:  # an added key was saved by create_api_key
            super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: forms.ModelForm[ApiKey], formsets: Any, change: bool) -> None:
        if change:  # an added key has nothing more to save
            super().save_related(request, form, formsets, change)

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            revoke_api_key(api_key)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} API key(s).")
