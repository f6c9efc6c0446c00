"""The console's knowledge pages: the knowledge bases at a glance, and the bulk import of synonyms and
protected terms (upload or paste, preview what changes and every line that cannot be used, then
apply). Registered as admin views by ``knowledge.admin``."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from knowledge.selectors import knowledge_bases_at_a_glance
from knowledge.vocabulary import FORMATS, apply_import, plan_import
from tenants.models import Tenant
from tenants.selectors import tenants_visible_to

MAX_IMPORT_BYTES = 2 * 1024 * 1024


class VocabularyImportForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    format = forms.ChoiceField()
    file = forms.FileField(required=False, help_text="UTF-8; or paste the lines below")
    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 10, "cols": 80}), label="Lines")

    def __init__(self, *args, tenants, formats: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
        self.fields["format"].choices = [(name, FORMATS[name]) for name in formats]

    def clean(self):
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                raise forms.ValidationError(f"the file is larger than {MAX_IMPORT_BYTES // 1024} KiB")
            try:
                data["text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("the file is not UTF-8 text") from None
        if not data.get("text", "").strip():
            raise forms.ValidationError("upload a file or paste some lines")
        return data


def import_view(request, context: dict, *, model_admin, formats: list[str]) -> TemplateResponse:
    """GET: the form. POST: the preview; POST with ``apply``: the import, when the preview has no errors."""
    if not (model_admin.has_add_permission(request) and model_admin.has_change_permission(request)):
        raise PermissionDenied
    tenants = tenants_visible_to(request.user)
    data = request.POST if request.method == "POST" else None
    form = VocabularyImportForm(data, request.FILES or None, tenants=tenants, formats=formats)
    plan = None
    if data is not None and form.is_valid():
        tenant, text = form.cleaned_data["tenant"], form.cleaned_data["text"]
        plan = plan_import(tenant, form.cleaned_data["format"], text)
        if "apply" in data and not plan.errors:
            apply_import(tenant, plan)
            messages.success(
                request,
                f"Imported for {tenant.name}: {len(plan.add)} added, {len(plan.update)} updated, "
                f"{len(plan.unchanged)} unchanged.",
            )
            return redirect(f"admin:{context['opts'].app_label}_{context['opts'].model_name}_changelist")
        # The preview carries the lines (an uploaded file's too) to the apply step.
        form = VocabularyImportForm({**data.dict(), "text": text}, tenants=tenants, formats=formats)
    context.update(form=form, plan=plan, has_tenants=tenants.exists())
    return TemplateResponse(request, "admin/knowledge/import.html", context)


def glance_view(request, context: dict) -> TemplateResponse:
    """Per knowledge base of the tenants the user sees: documents by status, chunks, the active
    version's model and chunking, the latest failures."""
    context.update(glances=knowledge_bases_at_a_glance(tenants_visible_to(request.user)))
    return TemplateResponse(request, "admin/knowledge/glance.html", context)
