"""NetworkPolicy and Secret as data: the entry syntax, what an entry matches, which addresses count as
non-public, and the one-line summary."""

from __future__ import annotations

import ipaddress
import re

import pytest
from pydantic import ValidationError

from genpark_repl_tools.egress import ConnectionRecord, NetworkPolicy, Secret, summarise
from genpark_repl_tools.egress._policy import non_public_kind


@pytest.mark.parametrize(
    ("entry", "written"),
    [
        ("api.example.com:443", "api.example.com:443"),
        ("API.Example.COM.:8443", "api.example.com:8443"),
        ("*.example.org:443", "*.example.org:443"),
        ("example.net", "example.net"),
        ("10.0.0.5:8080", "10.0.0.5:8080"),
        ("[fd00::5]:443", "[fd00::5]:443"),
        ("[::ffff:10.0.0.5]:443", "10.0.0.5:443"),
        ("bücher.example", "xn--bcher-kva.example"),
    ],
)
def test_entries_are_stored_normalised(entry: str, written: str) -> None:
    assert NetworkPolicy(allow=[entry]).allow == (written,)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("api.example.com:0", "port must be a number"),
        ("api.example.com:https", "port must be a number"),
        ("api.*.example.com", "wildcard is allowed only as the first label"),
        ("*.com.*", "wildcard is allowed only as the first label"),
        ("*.localhost", "wildcard needs a domain with a dot"),
        ("*.10.0.0.1", "needs a domain name, not an address"),
        ("fd00::5", "write an IPv6 entry as [address]:port"),
        ("http://api.example.com", "expected host[:port]"),
        ("user@api.example.com", "expected host[:port]"),
        ("", "expected host[:port]"),
        ("1.2.3", "expected host[:port]"),
    ],
)
def test_bad_entries_are_refused_with_the_reason(entry: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        NetworkPolicy(allow=[entry])


def test_one_string_is_not_a_list_of_entries() -> None:
    # "api.example.com" would otherwise be read as fifteen one-letter entries.
    with pytest.raises(ValidationError, match="not one string"):
        NetworkPolicy(allow="api.example.com")


def test_what_entries_match() -> None:
    policy = NetworkPolicy(allow=["api.example.com:443", "*.example.org:443", "example.net", "10.0.0.5:8080"])
    assert policy.allows("api.example.com", 443)
    assert not policy.allows("api.example.com", 80)
    assert not policy.allows("x.api.example.com", 443)
    assert policy.allows("a.example.org", 443) and policy.allows("a.b.example.org", 443)
    assert not policy.allows("example.org", 443)  # the wildcard is below the domain, not the domain
    assert not policy.allows("badexample.org", 443)
    assert policy.allows("example.net", 80) and policy.allows("example.net", 443)
    assert not policy.allows("example.net", 8080)
    assert policy.allows("10.0.0.5", 8080) and not policy.allows("10.0.0.6", 8080)
    assert policy.allows_address(ipaddress.ip_address("10.0.0.5"), 8080)
    assert not policy.allows_address(ipaddress.ip_address("10.0.0.5"), 80)


def test_secret_names_and_hosts_are_checked_and_the_value_is_not_shown() -> None:
    secret = Secret(value="s3cr3t-value", hosts=["api.example.com:443"])
    assert "s3cr3t-value" not in repr(secret) and "s3cr3t-value" not in str(
        NetworkPolicy(secrets={"T": secret})
    )
    with pytest.raises(ValidationError, match="not an environment variable name"):
        NetworkPolicy(secrets={"MY-TOKEN": secret})
    with pytest.raises(ValidationError, match="expected host"):
        Secret(value="x", hosts=["https://api.example.com"])
    with pytest.raises(ValidationError):
        Secret(value="x", hosts=[])


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.7", "private"),
        ("fd00::7", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "reserved"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_non_public_addresses(address: str, kind: str | None) -> None:
    assert non_public_kind(ipaddress.ip_address(address)) == kind


def _record(host: str, verdict: str) -> ConnectionRecord:
    return ConnectionRecord.model_validate(
        {"session": "s", "host": host, "port": 443, "method": "CONNECT", "verdict": verdict}
    )


def test_the_summary_is_one_line() -> None:
    records = [_record("api.example.com", "allowed")] * 2 + [_record("evil.example", "refused")]
    assert summarise(records) == "network: 2 connections to api.example.com; 1 refused: evil.example"
    assert summarise([]) == ""
    many = [_record(f"h{i}.example", "refused") for i in range(5)] + [_record("pypi.org", "failed")]
    assert summarise(many) == (
        "network: 5 refused: h0.example, h1.example, h2.example and 2 more; 1 failed: pypi.org"
    )
