"""The policy as plain data: what executed code may use. Mechanism lives in `_runtime`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Policy"]


class Policy(BaseModel):
    """What code run by the engine may do.

    Derive one from a preset rather than building it field by field:
    `Policy.trusted()`. Policies are immutable; `with_*`/`allow_*` methods return a new one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Preset name this policy derives from, shown in every result.")
    restricted: bool = Field(description="False: full Python (namespace isolation and telemetry only).")
    workspace: Path | None = Field(None, description="Directory the session's code may use for files.")

    @classmethod
    def trusted(cls) -> Policy:
        """Full Python: no audit, no guards; sessions are still isolated, captured and time-limited."""
        return cls(name="trusted", restricted=False)

    @classmethod
    def preset(cls, name: str) -> Policy:
        presets = {"trusted": cls.trusted}
        try:
            return presets[name]()
        except KeyError:
            known = ", ".join(sorted(presets))
            raise ValueError(f"unknown policy {name!r}; choose one of: {known}") from None

    def with_workspace(self, path: str | Path) -> Policy:
        return self.model_copy(update={"workspace": Path(path)})
