"""The models and their migrations agree: a model change without its migration fails the build."""
import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit:
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}")
