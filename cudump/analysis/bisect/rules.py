"""Rules: the user's, as digests (step 1) and narrowed to one launch (step 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cudump.analysis.bisect.errors import BisectError
from cudump.analysis.bisect.target import DEFAULT_TARGET_RULE, Target
from cudump.policy.rules import Rule, load_rules
from cudump.rundir import files as runfiles


@dataclass
class UserRules:
    """The user's rule files: checked (cudump.policy.rules) and as plain YAML data, rule by rule."""

    rules: list[Rule] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)   # the same rules, in order

    @classmethod
    def load(cls, paths: Sequence[Path]) -> UserRules:
        loaded = cls()
        for path in paths:
            checked = load_rules([path])               # RuleError says what is wrong
            raw = _raw_rules(path)
            if len(raw) != len(checked):
                raise BisectError(f"{path}: could not read its rules a second time")
            loaded.rules += checked
            loaded.raw += raw
        return loaded

    def snapshot_rules(self) -> list[tuple[Rule, dict[str, Any]]]:
        return [(r, raw) for r, raw in zip(self.rules, self.raw, strict=True)
                if not r.is_break]

    def target_rules(self, given: bool, target: Target) -> list[dict[str, Any]]:
        """The snapshot rules of the divergent launch: the user's that apply to it (`given`:
        rule files were given), else one of every pointer argument."""
        if not given:
            return [target_rule(DEFAULT_TARGET_RULE, target)]
        rules = [target_rule(raw, target) for rule, raw in self.snapshot_rules()
                 if target.rule_applies(rule)]
        if not rules:
            raise BisectError(f"no rule names {target.record.kernel}, though its digests came "
                              "from the rules")
        return rules


def _raw_rules(path: Path) -> list[dict[str, Any]]:
    """A checked rule file's rules as mappings (a file of `rules:`, a list, or one rule)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    items = data if isinstance(data, list) else [data]
    return [dict(item) for item in items]


def digest_rule(raw: dict[str, Any]) -> dict[str, Any]:
    """A user's snapshot rule taking digests instead of files."""
    return {**raw, "format": "digest"}


def target_rule(raw: dict[str, Any], target: Target) -> dict[str, Any]:
    """A user's rule (or the default one) narrowed to the target launch, before and after,
    as .npy and .png."""
    rule = {k: v for k, v in raw.items() if k not in ("every", "match", "kernel")}
    rule.update(target.selector())
    rule.update(skip=target.occurrence - 1, count=1, when="both", format="both")
    return rule


def write_rules(path: Path, rules: list[dict[str, Any]]) -> Path:
    """The rules in a file of the work directory: its folder a real one, the file put in
    place whole, never written through a symlink (runfiles)."""
    runfiles.make_dir(path.parent)
    text = yaml.safe_dump({"rules": rules}, sort_keys=False, allow_unicode=True)
    runfiles.write_whole(path, lambda f: f.write(text.encode("utf-8")))
    return path
