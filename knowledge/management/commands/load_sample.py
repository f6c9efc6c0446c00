import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from knowledge.vocabulary import seed_vocabulary
from tenants.models import Scope
from tenants.services import create_api_key, get_or_create_tenant, revoke_api_key

SAMPLE_DIR = Path(settings.BASE_DIR) / "sample_kb"
VOCABULARY_FOLDER = ".vocabulary"  # hidden: no document of the KB (``discover_files``)
DEMO_KEY_NAME = "readme-demo"


class Command(BaseCommand):
    help = (
        "Set up the demo: tenant 'demo', the sample knowledge base and its curated vocabulary, an admin login and an API key. "
        "Passwords and keys are stored hashed, so each run issues fresh ones and revokes the previous demo key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="demo")
        parser.add_argument("--kb", default="sample")
        parser.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="where the service listens, for the printed admin link"
        )

    def handle(self, *args: object, tenant: str, kb: str, base_url: str, **options: object) -> None:
        owner = get_or_create_tenant(tenant)
        # The sample's curated vocabulary first: its terms shape tokenization and the graph's entities.
        if (added := seed_vocabulary(owner, SAMPLE_DIR / VOCABULARY_FOLDER)) is not None:
            self.stdout.write(f"vocabulary: {added} protected terms and synonym groups added")
        call_command("ingest", str(SAMPLE_DIR), tenant=owner.name, kb=kb, stdout=self.stdout, stderr=self.stderr)

        password = secrets.token_urlsafe(12)
        admin, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()

        for previous in owner.api_keys.filter(name=DEMO_KEY_NAME, revoked_at__isnull=True):
            revoke_api_key(previous)
        # search and ingest: the README's and docs/knowledge.md's examples search, upload and build versions with this key.
        raw_key = create_api_key(tenant=owner, name=DEMO_KEY_NAME, scopes=[Scope.SEARCH, Scope.INGEST]).raw_key
        kb_id = owner.knowledge_bases.get(name=kb).pk
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "=" * 72,
                    f"Admin console: {base_url.rstrip('/')}/admin/  user: admin  password: {password}",
                    f"Knowledge base '{kb}' of tenant '{owner.name}' has id {kb_id}.",
                    "API key (copy this line into your shell):",
                    f"export API_KEY={raw_key}",
                    "=" * 72,
                    "",
                ]
            )
        )
