"""Model changes that state cached in this process must follow."""

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from tenants.models import ApiKey, RateTier, Tenant
from tenants.selectors import forget_api_keys


@receiver([post_save, post_delete], sender=ApiKey)
@receiver([post_save, post_delete], sender=Tenant)
@receiver([post_save, post_delete], sender=RateTier)
def forget_remembered_api_keys(**kwargs: object) -> None:
    """A change to a key, a tenant or a tier applies at once in the process that made it (the
    admin's); other processes see it when their remembered keys expire (API_KEY_CACHE_TTL_S)."""
    forget_api_keys()
