from django import forms
from django.contrib import admin

from tenants.models import ApiKey, RateTier, Scope, Tenant


class ApiKeyForm(forms.ModelForm):
    """Scopes as checkboxes rather than the array field's comma-separated text."""

    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiKey
        fields = "__all__"


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    form = ApiKeyForm
    extra = 0
    fields = ["name", "prefix", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # keys are issued by `manage.py create_api_key` (tenants.services.create_api_key)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "is_active", "rate_tier", "created_at"]
    list_filter = ["rate_tier", "is_active"]
    search_fields = ["name"]
    inlines = [ApiKeyInline]


@admin.register(RateTier)
class RateTierAdmin(admin.ModelAdmin):
    list_display = ["name", "requests_per_window", "endpoint_limits"]
    search_fields = ["name"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["prefix", "tenant", "name", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["tenant"]
    search_fields = ["prefix", "name", "tenant__name"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]

    def has_add_permission(self, request) -> bool:
        # Keys are issued by `manage.py create_api_key`, which shows the secret once.
        return False
