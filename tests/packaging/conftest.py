"""``user_project/`` is a user's tree run inside a fresh venv by the tests here, never by our own run."""

collect_ignore = ["user_project"]
