"""What a session may reach over the network: allow entries, secrets and limits, as plain data.

An entry names a host and a port: `api.example.com:443`; `*.example.org:443` (any name below
example.org, not example.org itself); `example.net` (ports 80 and 443); an IP literal `10.0.0.5:8080` or
`[fd00::5]:443`. Names are compared in lower case, without a trailing dot, non-ASCII names in their IDNA
form. An IP literal entry is the only way to reach that address, by a literal or by a name that resolves to
it; a name alone never reaches a loopback, private, link-local, multicast, reserved or metadata address.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_NAME_MAX = 253


def normalise_host(host: str) -> str:
    """The name as the proxy compares it: lower case, no trailing dot, IDNA for non-ASCII.

    Raises ValueError for anything that is not a host name or an IP literal.
    """
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    address = parse_address(host)
    if address is not None:
        return str(address)
    name = host.rstrip(".").lower() if host != "." else ""
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"not a host name: {host!r}") from None
    if not name or len(name) > _NAME_MAX or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"not a host name: {host!r}")
    if name.split(".")[-1].isdigit():
        # "1.2.3" or "0x7f.1" are not IP literals to ipaddress but are to some resolvers: never a name.
        raise ValueError(f"not a host name: {host!r}")
    return name


def parse_address(host: str) -> IPAddress | None:
    """The IP address `host` spells, or None for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class Entry:
    """One parsed allow entry. `host` is a normalised name (without the `*.` of a wildcard) or address."""

    host: str
    ports: tuple[int, ...]
    wildcard: bool = False

    @classmethod
    def parse(cls, text: str) -> Entry:
        spec = text.strip()
        ports: tuple[int, ...] = DEFAULT_PORTS
        if "/" in spec:
            raise ValueError(f"{text!r}: expected host[:port], not a URL")
        if spec.startswith("["):
            host, sep, rest = spec[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"{text!r}: write an IPv6 entry as [address]:port")
            port_text = rest[1:] if rest else None
        elif spec.count(":") > 1:
            raise ValueError(f"{text!r}: write an IPv6 entry as [address]:port")
        else:
            host, sep, port_text_ = spec.partition(":")
            port_text = port_text_ if sep else None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
            ports = (int(port_text),)
        wildcard = host.startswith("*.")
        if wildcard:
            host = host[2:]
        if "*" in host:
            raise ValueError(f"{text!r}: a wildcard is allowed only as the first label, as in *.example.org")
        try:
            normalised = normalise_host(host)
        except ValueError:
            raise ValueError(
                f"{text!r}: expected host[:port], *.domain[:port] or an IP address[:port]"
            ) from None
        if wildcard and parse_address(normalised) is not None:
            raise ValueError(f"{text!r}: a wildcard needs a domain name, not an address")
        if wildcard and "." not in normalised:
            raise ValueError(f"{text!r}: a wildcard needs a domain with a dot, as in *.example.org")
        return cls(normalised, ports, wildcard)

    def matches(self, host: str, port: int) -> bool:
        """Whether the normalised `host` on `port` is what this entry allows."""
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        if ":" in host:
            host = f"[{host}]"
        return host if self.ports == DEFAULT_PORTS else f"{host}:{self.ports[0]}"


def _entries(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ValueError("expected a list of entries, not one string")
    if not isinstance(value, (list, tuple)):
        raise ValueError("expected a list of entries")
    return tuple(str(Entry.parse(str(item))) for item in value)


class Secret(BaseModel):
    """A value the sandbox never sees: its environment holds a placeholder that the proxy replaces with
    the value only in requests to `hosts` (entries, same syntax as `NetworkPolicy.allow`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: SecretStr
    hosts: tuple[str, ...] = Field(min_length=1)

    @field_validator("hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> tuple[str, ...]:
        return _entries(value)

    @field_validator("value")
    @classmethod
    def _fits_a_header(cls, value: SecretStr) -> SecretStr:
        # The value is written into request headers: a line break would start a header of its own.
        text = value.get_secret_value()
        if not text or not text.isascii() or any(c < " " or c == "\x7f" for c in text):
            raise ValueError("a secret's value must be printable ASCII without line breaks")
        return value

    def entries(self) -> tuple[Entry, ...]:
        return tuple(Entry.parse(host) for host in self.hosts)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class NetworkPolicy(BaseModel):
    """The names a session may reach through the engine's egress proxy, and how much.

    Nothing else is reachable: the proxy decides by the name it resolves itself, checks the addresses
    that name resolves to, and refuses a connection outside these entries or past these limits.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: tuple[str, ...] = ()
    secrets: dict[str, Secret] = Field(default_factory=dict)
    max_connections: int = Field(default=16, ge=1, description="connections open at once")
    max_bytes: int | None = Field(
        default=1 << 30, ge=1, description="bytes up and down over the session's life; None: no limit"
    )

    @field_validator("allow", mode="before")
    @classmethod
    def _parse_allow(cls, value: object) -> tuple[str, ...]:
        return _entries(value)

    @field_validator("secrets")
    @classmethod
    def _check_secret_names(cls, value: dict[str, Secret]) -> dict[str, Secret]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    def entries(self) -> tuple[Entry, ...]:
        return tuple(Entry.parse(entry) for entry in self.allow)

    def allows(self, host: str, port: int) -> bool:
        """Whether the normalised `host` (a name or an address) on `port` is listed."""
        return any(entry.matches(host, port) for entry in self.entries())

    def allows_address(self, address: IPAddress, port: int) -> bool:
        """Whether an entry names this exact address and port (so a name may resolve to it)."""
        return self.allows(str(address), port)


# Addresses that serve cloud instance metadata (credentials among it) on the instance's own network.
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)


def non_public_kind(address: IPAddress) -> str | None:
    """What kind of non-public address this is ("loopback", "private", ...), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in _METADATA:
        return "metadata"
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    if not address.is_global:
        return "reserved"  # shared (carrier-grade NAT), documentation, translation ranges
    return None
