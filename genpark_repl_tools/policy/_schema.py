"""The shapes of a policy's rules: plain pydantic data, shared by the presets and `Policy`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AttributeRules", "ModuleRule"]


class ModuleRule(BaseModel):
    """What one module (and, with `submodules`, the modules below it) may be imported for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Dotted module name, e.g. 'json' or 'numpy.linalg'.")
    allowed: bool = Field(True, description="False refuses the module (and its submodules).")
    submodules: bool = Field(False, description="Also admit submodules that no other rule names.")
    only: tuple[str, ...] | None = Field(None, description="If set, the only public names exposed.")
    hidden: dict[str, str] = Field(
        default_factory=dict, description="Public names withheld from code, each with the reason."
    )
    note: str = Field("", description="Why the module is allowed or refused.")


class AttributeRules(BaseModel):
    """Which attribute names code may use, and which special methods its classes may define."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    readable_private: tuple[str, ...] = Field(
        description="Names starting with '_' that code may read: strings such as __name__, and "
        "namedtuple's public methods."
    )
    denied: tuple[str, ...] = Field(description="Public names refused anyway (frame and code internals).")
    denied_prefixes: tuple[str, ...] = Field(description="Prefixes of refused public names.")
    routed: tuple[str, ...] = Field(
        description="Attribute reads checked at run time (dynamic attribute lookups hide behind them)."
    )
    class_dunders: tuple[str, ...] = Field(
        description="Special methods a class defined by the code may have."
    )
    class_dunder_names: tuple[str, ...] = Field(description="Special names a class body may assign.")
    class_dunder_reasons: dict[str, str] = Field(
        default_factory=dict, description="Why notable special methods are refused."
    )
