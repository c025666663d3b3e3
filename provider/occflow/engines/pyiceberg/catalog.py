"""pyiceberg catalogs from an Airflow connection's fields, in the shape of the ``iceberg``
connection type of ``apache-airflow-providers-apache-iceberg`` (2.x): ``host`` is the catalog's
URI (a REST endpoint, or a SQLAlchemy URL for a SQL catalog), ``login`` / ``password`` the REST
catalog's OAuth2 client credentials, ``extra`` the other ``load_catalog`` properties (``type``,
``warehouse``, ``s3.*``, ...). The fields arrive as plain values: engines know nothing of Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ...core.errors import InvalidDeclarationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

#: The catalog types occflow checks the properties of before loading (pyiceberg loads others too).
SQL, REST = "sql", "rest"
#: A PostgreSQL URL without a driver gets the one occflow's ``postgres`` extra installs:
#: SQLAlchemy 2.1 would pick psycopg 3, which is not installed (as the lease store does).
_PG_SCHEMES = {"postgres": "postgresql+psycopg2", "postgresql": "postgresql+psycopg2"}


@dataclass(frozen=True)
class CatalogConfig:
    """The properties ``pyiceberg.catalog.load_catalog(name, **properties)`` takes, and a name."""

    name: str = "default"
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise InvalidDeclarationError("an Iceberg catalog needs a name, got an empty string")
        kind = self.kind
        if kind == SQL and not self.properties.get("uri"):
            raise InvalidDeclarationError(
                f"Iceberg catalog {self.name!r}: a SQL catalog needs uri= (a SQLAlchemy URL: sqlite:///path/catalog.db "
                "or postgresql+psycopg2://user@host/db)"
            )
        if kind == SQL and not self.properties.get("warehouse"):
            raise InvalidDeclarationError(
                f"Iceberg catalog {self.name!r}: a SQL catalog needs warehouse= (where table files go, e.g. file:///data/warehouse)"
            )
        if kind == REST and not self.properties.get("uri"):
            raise InvalidDeclarationError(f"Iceberg catalog {self.name!r}: a REST catalog needs uri= (its endpoint URL)")

    @property
    def kind(self) -> str:
        """``sql``, ``rest`` or another pyiceberg catalog type; a SQLAlchemy URL without ``type``
        is a SQL catalog (as pyiceberg infers it from the URI's scheme)."""
        given = self.properties.get("type")
        if given:
            return str(given).lower()
        uri = str(self.properties.get("uri", ""))
        return REST if uri.startswith(("http://", "https://")) else SQL

    @classmethod
    def from_connection(
        cls,
        name: str,
        host: str | None,
        login: str | None = None,
        password: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> CatalogConfig:
        """The catalog an ``iceberg`` connection names (its fields as plain values)."""
        props = {str(k): str(v) for k, v in (extra or {}).items() if v is not None}
        if host:
            props.setdefault("uri", host)
        if login or password:
            # The provider's hook passes the client credentials to a REST catalog only.
            props.setdefault("credential", f"{login or ''}:{password or ''}")
        return cls(name, props)

    def describe(self) -> str:
        """The catalog for messages: its name, type and URI with any password masked."""
        return f"{self.name} ({self.kind} catalog at {mask_url(str(self.properties.get('uri', '?')))})"

    def load(self) -> Catalog:
        from pyiceberg.catalog import load_catalog  # optional heavy dependency

        props = dict(self.properties)
        props.setdefault("type", self.kind)
        if self.kind == SQL:
            scheme, sep, rest = str(props["uri"]).partition("://")
            props["uri"] = f"{_PG_SCHEMES.get(scheme, scheme)}{sep}{rest}"
        return load_catalog(self.name, **props)


def mask_url(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***`` (messages, logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


__all__ = ["REST", "SQL", "CatalogConfig", "mask_url"]
