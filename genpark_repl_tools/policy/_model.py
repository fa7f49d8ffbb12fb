"""The policy as plain data: what executed code may use. Mechanism lives in the runtime modules.

`Policy` is the model users derive from a preset; the presets' reviewed tables live in
`_presets.py` and the shapes of the rules in `_schema.py`. Nothing here imports mechanism.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._presets import ATTRIBUTE_RULES, DENIED_BUILTINS, STANDARD_RULES, STDLIB_RULES, STRICT_BUILTINS
from ._schema import AttributeRules, ModuleRule

__all__ = ["AttributeRules", "ModuleRule", "Policy"]


class Policy(BaseModel):
    """What code run by the engine may do.

    Derive one from a preset rather than building it field by field:
    `Policy.standard().allow_imports("sympy").with_workspace("/data/run-7")`.
    Policies are immutable; `with_*`/`allow_*`/`deny_*` methods return a new one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Preset name this policy derives from, shown in every result.")
    restricted: bool = Field(description="False: full Python (namespace isolation and telemetry only).")
    builtins: tuple[str, ...] | None = Field(
        None, description="Builtin names the code may use; None means all of them (trusted)."
    )
    denied_builtins: dict[str, str] = Field(
        default_factory=dict, description="Builtins withheld, each with the reason and what to use instead."
    )
    imports: tuple[ModuleRule, ...] = Field((), description="Modules the code may import (restricted only).")
    attributes: AttributeRules | None = Field(None, description="Attribute rules (restricted only).")
    workspace: Path | None = Field(
        None,
        description="Directory the code may use for files. None with files=True: a temporary "
        "directory per engine, removed with it.",
    )
    files: bool = Field(False, description="Whether the code may open files (inside the workspace only).")
    threads: bool = Field(False, description="Whether the code may start threads (trusted only).")
    max_constant_bits: int = Field(
        1_000_000, gt=0, description="Largest integer a constant expression may produce, in bits."
    )
    max_constant_length: int = Field(
        10_000_000, gt=0, description="Longest string/bytes/list a constant expression may produce."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.restricted and self.threads:
            raise ValueError(
                "threads=True needs restricted=False: code on another thread runs outside the guards"
            )
        if self.restricted and (self.builtins is None or self.attributes is None):
            raise ValueError("a restricted policy needs explicit builtins and attribute rules")
        return self

    # ---- presets ----------------------------------------------------------------------------------

    @classmethod
    def trusted(cls) -> Policy:
        """Full Python: no audit, no guards; sessions are still isolated, captured and time-limited."""
        return cls(name="trusted", restricted=False, files=True, threads=True)

    @classmethod
    def strict(cls) -> Policy:
        """Pure computation: reviewed builtins, a reviewed stdlib allowlist, no files, no threads."""
        return cls(
            name="strict",
            restricted=True,
            builtins=STRICT_BUILTINS,
            denied_builtins=dict(DENIED_BUILTINS),
            imports=STDLIB_RULES,
            attributes=ATTRIBUTE_RULES,
            files=False,
        )

    @classmethod
    def standard(cls) -> Policy:
        """Strict plus the data stack when installed, and files inside the workspace."""
        denied = dict(DENIED_BUILTINS)
        del denied["open"]
        return cls(
            name="standard",
            restricted=True,
            builtins=(*STRICT_BUILTINS, "open"),
            denied_builtins=denied,
            imports=(*STDLIB_RULES, *STANDARD_RULES),
            attributes=ATTRIBUTE_RULES,
            files=True,
        )

    @classmethod
    def preset(cls, name: str) -> Policy:
        presets = {"strict": cls.strict, "standard": cls.standard, "trusted": cls.trusted}
        try:
            return presets[name]()
        except KeyError:
            known = ", ".join(sorted(presets))
            raise ValueError(f"unknown policy {name!r}; choose one of: {known}") from None

    # ---- derivation -------------------------------------------------------------------------------

    def with_workspace(self, path: str | Path) -> Policy:
        """Use `path` as the workspace (file access there needs `files`, which standard has)."""
        return self.model_copy(update={"workspace": Path(path)})

    def with_files(self, enabled: bool = True) -> Policy:
        """Allow (or refuse) opening files inside the workspace."""
        return self.model_copy(update={"files": enabled})

    def allow_imports(self, *names: str, submodules: bool = True) -> Policy:
        """Admit more modules (with their submodules unless `submodules=False`).

        Modules admitted here get no per-name review: their public API is exposed as is. The
        runtime still hides private names, refuses writes to the module, and its audit hook still
        refuses processes, network and files outside the workspace.
        """
        if not self.restricted:
            return self
        added = tuple(
            ModuleRule(name=n, submodules=submodules, note="allowed by allow_imports()") for n in names
        )
        kept = tuple(r for r in self.imports if r.name not in names)
        return self.model_copy(update={"imports": (*kept, *added)})

    def deny_imports(self, *names: str, reason: str = "refused by deny_imports()") -> Policy:
        """Refuse modules (and their submodules) even if a broader rule admits them."""
        if not self.restricted:
            return self
        refused = tuple(ModuleRule(name=n, allowed=False, note=reason) for n in names)
        kept = tuple(r for r in self.imports if r.name not in names)
        return self.model_copy(update={"imports": (*kept, *refused)})

    # ---- lookups (pure functions of the data) -----------------------------------------------------

    def module_rule(self, name: str) -> ModuleRule | None:
        """The rule that decides `name`: its own, or the nearest ancestor's with submodules=True.

        A refusing ancestor refuses every module below it. Private modules (any part starting
        with '_') are never admitted.
        """
        if any(part.startswith("_") or not part for part in name.split(".")):
            return None
        rules = {r.name: r for r in self.imports}
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            rule = rules.get(".".join(parts[:i]))
            if rule is not None and not rule.allowed:
                return rule
        for i in range(len(parts), 0, -1):
            rule = rules.get(".".join(parts[:i]))
            if rule is None:
                continue
            if not rule.allowed:
                return rule
            if i == len(parts) or rule.submodules:
                return rule
            return None
        return None

    def allows_module(self, name: str) -> bool:
        rule = self.module_rule(name)
        return rule is not None and rule.allowed

    def allowed_modules(self) -> list[str]:
        """Top-level modules code may import, for messages."""
        return sorted({r.name.split(".")[0] for r in self.imports if r.allowed and "." not in r.name})
