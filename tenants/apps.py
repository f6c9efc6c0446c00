from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class TenantsConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'tenants'

    def ready(self):
        from tenants.models import ApiKey, RateTier, Tenant

        # A change to a key, a tenant or a tier applies at once in the process that made it (the
        # admin's); other processes see it when their remembered keys expire (API_KEY_CACHE_TTL_S).
        for model in (ApiKey, Tenant, RateTier):
            for signal in (post_save, post_delete):
                uid = f"forget-api-keys-{model.__name__}-{id(signal)}"
                signal.connect(_forget_api_keys, sender=model, dispatch_uid=uid)


def _forget_api_keys(**kwargs) -> None:
    from tenants.selectors import forget_api_keys

    forget_api_keys()
