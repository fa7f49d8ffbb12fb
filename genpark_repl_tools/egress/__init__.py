"""Network by name for sandboxed sessions: an allow list of host names, enforced by an egress proxy.

A sandboxed worker keeps no network interface but loopback; its only way out is its session's listener on
the engine's `EgressProxy`, set in the usual proxy variables. See docs/network.md.
"""

from __future__ import annotations

from ._policy import NetworkPolicy, Secret
from ._proxy import EgressProxy, SessionEndpoint
from ._records import ConnectionRecord, summarise

__all__ = ["ConnectionRecord", "EgressProxy", "NetworkPolicy", "Secret", "SessionEndpoint", "summarise"]
