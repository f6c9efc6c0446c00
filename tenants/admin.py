from django.contrib import admin

from tenants.models import ApiKey, Tenant


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["name", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    can_delete = False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "is_active", "created_at"]
    search_fields = ["name"]
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "tenant", "name", "created_at", "expires_at", "revoked_at"]
    list_filter = ["tenant"]
    search_fields = ["prefix", "name", "tenant__name"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]

    def has_add_permission(self, request) -> bool:
        # Keys are issued by `manage.py create_api_key`, which shows the secret once.
        return False
