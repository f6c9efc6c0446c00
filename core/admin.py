"""Admin building blocks shared by the apps' consoles."""


class ReadOnlyAdminMixin:
    """For rows the admin shows but never writes: something else (ingestion, a console page) makes them."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
