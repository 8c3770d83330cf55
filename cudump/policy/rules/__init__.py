"""Rules: which kernels to snapshot, digest, scan or stop at, and how to read their buffers.

The rule type and its actions (rule.py), which launches and arguments a rule takes
(matching.py), and rule files: read as YAML (yaml_file.py, where the format is
described) and checked field by field (validation.py).
"""

from cudump.policy.rules.matching import RuleCounter, RuleMatching
from cudump.policy.rules.rule import (
    DIGEST_FORMATS,
    PHASES,
    SCAN_FORMATS,
    STANDALONE_FORMATS,
    Action,
    ArgOverride,
    LaunchChoice,
    Rule,
    capture_rule,
    digest_rule,
    option_rule,
    scan_rule,
)
from cudump.policy.rules.validation import (
    ACTIONS,
    GEOMETRY_KEYS,
    MAX_CONSTANT,
    MAX_COUNT,
    MAX_EVERY,
    MAX_PARAM_BYTES,
    MAX_SKIP,
    OVERRIDE_KEYS,
    RULE_KEYS,
    SNAPSHOT_KEYS,
)
from cudump.policy.rules.yaml_file import MAX_RULE_FILE_BYTES, MAX_YAML_DEPTH, load_rules

__all__ = [
    "ACTIONS", "DIGEST_FORMATS", "GEOMETRY_KEYS", "MAX_CONSTANT", "MAX_COUNT",
    "MAX_EVERY", "MAX_PARAM_BYTES", "MAX_RULE_FILE_BYTES", "MAX_SKIP", "MAX_YAML_DEPTH",
    "OVERRIDE_KEYS", "PHASES", "RULE_KEYS", "SCAN_FORMATS", "SNAPSHOT_KEYS",
    "STANDALONE_FORMATS", "Action", "ArgOverride", "LaunchChoice", "Rule", "RuleCounter",
    "RuleMatching",
    "capture_rule", "digest_rule", "load_rules", "option_rule", "scan_rule",
]
