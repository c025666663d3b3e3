"""A declaration prints on one line (it shows up in logs and tracebacks): the profile by name,
not its whole matrix."""

from occflow.core.declaration import WriteDeclaration
from occflow.core.profiles import PROFILES


def test_every_profile_prints_a_declaration_on_one_short_line() -> None:
    for name in PROFILES:
        profile = PROFILES[name]
        for operation in profile.operations:
            declared = WriteDeclaration.create("db.t", operation, profile=name, partitions={"ds": "2024-01-01"})
            text = repr(declared)
            assert "\n" not in text and len(text) < 200, text
            assert f"{operation.value} on 'db.t' [ds=2024-01-01]" in text and repr(name) in text
