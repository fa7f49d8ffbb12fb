"""The policy's data prepared for fast checks, shared by the audit, the transform and the guards."""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import unicodedata

from ._model import Policy

_LISTED_MODULES = 16
# What an agent reaches for most, in the order a refusal lists them (when the policy allows them).
_USEFUL_MODULES = (
    "math",
    "statistics",
    "json",
    "re",
    "datetime",
    "collections",
    "itertools",
    "functools",
    "random",
    "decimal",
    "fractions",
    "numpy",
    "pandas",
    "matplotlib",
    "scipy",
    "csv",
    "string",
    "textwrap",
    "dataclasses",
    "typing",
)


@functools.cache
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


__all__ = ["GEN_UNSAFE_EXCEPTIONS", "StaticRules", "exact", "nfkc", "rules_for"]

# Exception classes a generator must not catch: catching them lets code run when the generator is
# closed or collected, which may happen later, anywhere, outside the time limit.
GEN_UNSAFE_EXCEPTIONS = ("BaseException", "GeneratorExit")

_ATTR_HINTS = {
    "__class__": "use type(obj)",
    "__dict__": "use getattr(obj, name) or dataclasses.asdict(obj)",
    "__len__": "use len(obj)",
    "__iter__": "use iter(obj)",
    "__next__": "use next(it)",
    "__str__": "use str(obj)",
    "__repr__": "use repr(obj)",
    "__getitem__": "use obj[key]",
    "__call__": "call obj(...) directly",
    "__init__": "inside a method, call super().__init__(...)",
}


_UNKNOWN = object()
_IMPORT_REFUSALS_KEPT = 4096


def exact(value: str) -> str:
    """`value` as a plain str: a str subclass could override the methods the checks call."""
    return value if type(value) is str else str.__str__(value)


def nfkc(name: str) -> str:
    """Identifiers as Python compares them (the parser normalizes with NFKC too)."""
    name = exact(name)
    return name if name.isascii() else unicodedata.normalize("NFKC", name)


class StaticRules:
    """Lookups derived once from a restricted Policy."""

    def __init__(self, policy: Policy) -> None:
        if policy.attributes is None or policy.builtins is None:
            raise ValueError("static rules need a restricted policy")
        attrs = policy.attributes
        self.policy = policy
        self.name = policy.name
        self.builtins = frozenset(policy.builtins)
        self.denied_builtins = dict(policy.denied_builtins)
        self.readable_private = frozenset(attrs.readable_private)
        self.denied_attrs = frozenset(attrs.denied)
        self.denied_prefixes = tuple(attrs.denied_prefixes)
        self.routed = frozenset(attrs.routed)
        self.class_dunders = frozenset(attrs.class_dunders)
        self.class_dunder_names = frozenset(attrs.class_dunder_names)
        self.class_dunder_reasons = dict(attrs.class_dunder_reasons)
        self.max_bits = policy.max_constant_bits
        self.max_length = policy.max_constant_length
        # Only what is importable here: a refusal must not send the model to a module it cannot load.
        self.allowed_modules = [m for m in policy.allowed_modules() if _importable(m)]
        self.key = ""  # digest of the policy, set by rules_for()
        self._import_refusals: dict[str, str | None] = {}

    # ---- attribute names -------------------------------------------------------------------------

    def attribute_refusal(self, name: str, *, store: bool = False) -> str | None:
        """Why reading (or writing) attribute `name` is refused, or None if it is allowed."""
        name = nfkc(name)
        if name.startswith("_"):
            if not store and name in self.readable_private:
                return None
            hint = _ATTR_HINTS.get(name, "use the public API instead")
            return (
                f"attribute '{name}' is not allowed under policy '{self.name}': "
                f"names starting with '_' are private; {hint}"
            )
        if name in self.denied_attrs or name.startswith(self.denied_prefixes):
            return (
                f"attribute '{name}' is not allowed under policy '{self.name}': "
                "frame, code and traceback internals are not available"
            )
        return None

    def class_dunder_refusal(self, name: str) -> str:
        reason = self.class_dunder_reasons.get(name, "it is not a reviewed special method")
        return (
            f"defining '{name}' is not allowed under policy '{self.name}': {reason}; "
            "allowed special methods include __init__, __repr__, __eq__, __len__, __iter__, "
            "__getitem__, __call__, __enter__/__exit__ and the operators"
        )

    def builtin_refusal(self, name: str) -> str:
        reason = self.denied_builtins.get(name, "it is not available")
        return f"builtin '{name}' is not available under policy '{self.name}': {reason}"

    # ---- imports ---------------------------------------------------------------------------------

    def import_refusal(self, module: str) -> str | None:
        if module == "__future__":
            return None
        # Remembered per name (a pure function of the policy, which is immutable): every cell that
        # imports pays a dict lookup instead of the policy's rule search.
        known = self._import_refusals.get(module, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        refusal = self._import_refusal(module)
        if len(self._import_refusals) >= _IMPORT_REFUSALS_KEPT:
            self._import_refusals.clear()
        self._import_refusals[exact(module)] = refusal
        return refusal

    def _import_refusal(self, module: str) -> str | None:
        rule = self.policy.module_rule(module)
        if rule is not None and rule.allowed:
            return None
        base = f"import of '{module}' is not allowed under policy '{self.name}'"
        if rule is not None and rule.note:
            return f"{base}: {rule.note}"
        top = module.partition(".")[0]
        if top != module and self.policy.allows_module(top):
            subs = sorted(r.name for r in self.policy.imports if r.allowed and r.name.startswith(top + "."))
            allowed = ", ".join(subs) if subs else f"'{top}' itself"
            return f"{base}; allowed from {top}: {allowed}"
        return f"{base}; {self.allowed_text(module)}"

    def allowed_text(self, refused: str) -> str:
        """The allowed modules for a refusal of `refused`: the ones closest to what was asked first,
        then the commonly useful, then how many more; never the whole list of dozens."""
        allowed = self.allowed_modules
        if len(allowed) <= _LISTED_MODULES:
            return "allowed: " + ", ".join(allowed)
        near = difflib.get_close_matches(refused.partition(".")[0], allowed, n=3, cutoff=0.6)
        shown = near + [m for m in _USEFUL_MODULES if m in allowed and m not in near]
        shown = shown[:_LISTED_MODULES]
        return f"allowed include: {', '.join(shown)} and {len(allowed) - len(shown)} more"

    def imported_name_refusal(self, module: str, name: str) -> str | None:
        """Why `from module import name` is refused statically, or None if the view decides."""
        name = nfkc(name)
        if name == "*":
            return None
        if name.startswith("_"):
            return (
                f"importing '{name}' from '{module}' is not allowed under policy '{self.name}': "
                "names starting with '_' are private"
            )
        sub = self.policy.module_rule(f"{module}.{name}")
        if sub is not None and not sub.allowed and sub.name == f"{module}.{name}":
            return self.import_refusal(f"{module}.{name}")
        rule = self.policy.module_rule(module)
        if rule is None:
            return None
        if name in rule.hidden:
            return f"'{module}.{name}' is not available under policy '{self.name}': {rule.hidden[name]}"
        if rule.only is not None and name not in rule.only and sub is None:
            note = f": {rule.note}" if rule.note else ""
            return f"'{module}.{name}' is not available under policy '{self.name}'{note}"
        return None


_by_json: dict[str, StaticRules] = {}
_by_id: dict[int, tuple[Policy, StaticRules]] = {}


def rules_for(policy: Policy) -> StaticRules:
    """Rules for `policy`, shared by equal policies (policies are immutable)."""
    hit = _by_id.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    key = policy.model_dump_json()
    rules = _by_json.get(key)
    if rules is None:
        if len(_by_json) > 64:
            _by_json.clear()
        rules = _by_json[key] = StaticRules(policy)
        rules.key = hashlib.sha1(key.encode()).hexdigest()
    if len(_by_id) > 256:
        _by_id.clear()
    _by_id[id(policy)] = (policy, rules)  # holds the policy, so its id is not reused meanwhile
    return rules
