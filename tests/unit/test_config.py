"""Operator settings (sj_operator.config.parse_config): defaults, flags over environment, rejection.

Every case passes its own ``environ``, so nothing depends on the environment the tests run in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sj_operator.config import ConfigError, OperatorConfig, parse_config
from sj_operator.settings import Pool

REPO = Path(__file__).resolve().parents[2]
S = timedelta(seconds=1)
M = timedelta(minutes=1)

DEFAULTS: dict[str, Any] = {
    "threshold": 0.70,
    "pools": (),
    "start_timeout": 60 * S,
    "retry_backoff": 10 * S,
    "max_retry_backoff": 10 * M,
    "tick": 5 * S,
    "cache_timeout": 10 * M,
    "stall_timeout": 5 * M,
    "namespaces": (),
    "schedulers": ("default-scheduler",),
    "protect_level": 1,
    "launch_backlog": 400,
    "starvation_after": 10 * M,
    "peering": "scavenger",
    "lease_namespace": "default",
    "verbose": False,
    "liveness_port": None,
    "metrics_port": 8080,
    "max_protection": 30 * M,
    "thrash_backoff": 30 * S,
    "max_thrash_backoff": 10 * M,
    "aging_step": 60 * M,
    "max_termination_grace": 300,
    "min_duration": 10 * S,
    "webhook_port": None,
    "webhook_service": None,
    "webhook_host": None,
    "webhook_secret": "scavenger-webhook-tls",
    "cluster_domain": "cluster.local",
    "default_namespace_quota": {},
    "default_namespace_weight": 1,
}


def settings(config: OperatorConfig) -> dict[str, Any]:
    """Every setting but the process identity (host name and pid by default)."""
    return config.model_dump(exclude={"identity"})


def test_defaults() -> None:
    config = parse_config([], {})
    assert settings(config) == DEFAULTS
    assert config.identity.endswith(f"-{os.getpid()}")


def test_empty_environment_values_are_ignored() -> None:
    environ = {"SJ_THRESHOLD": "", "SJ_TICK": "", "SJ_NAMESPACES": "", "SJ_LIVENESS_PORT": ""}
    assert settings(parse_config([], environ)) == DEFAULTS


# (argv, environ, expected settings that differ from the defaults)
VALID: list[tuple[str, list[str], dict[str, str], dict[str, Any]]] = [
    ("every flag", [
        "--threshold", "0.9", "--start-timeout", "2m", "--retry-backoff", "5s", "--max-retry-backoff", "1h",
        "--tick", "500ms", "--cache-timeout", "30m", "--namespaces", "team-a,team-b", "--protect-level", "2",
        "--starvation-after", "30m",
        "--peering", "sj-lease", "--lease-namespace", "ops", "--liveness-port", "8080", "--verbose",
        "--max-termination-grace", "60", "--min-duration", "1m", "--webhook-port", "9443",
        "--webhook-service", "ops/sj-webhook", "--webhook-secret", "sj-tls", "--metrics-port", "9090",
        "--cluster-domain", "corp.example",
    ], {}, {
        "threshold": 0.9, "start_timeout": 2 * M, "retry_backoff": 5 * S, "max_retry_backoff": 60 * M,
        "tick": timedelta(milliseconds=500), "cache_timeout": 30 * M, "namespaces": ("team-a", "team-b"),
        "protect_level": 2,
        "starvation_after": 30 * M, "peering": "sj-lease", "lease_namespace": "ops", "liveness_port": 8080,
        "verbose": True, "max_termination_grace": 60, "min_duration": 1 * M, "webhook_port": 9443,
        "webhook_service": "ops/sj-webhook", "webhook_secret": "sj-tls", "metrics_port": 9090,
        "cluster_domain": "corp.example",
    }),
    ("every environment variable", [], {
        "SJ_THRESHOLD": "0.5", "SJ_START_TIMEOUT": "90s", "SJ_RETRY_BACKOFF": "1m", "SJ_MAX_RETRY_BACKOFF": "20m",
        "SJ_TICK": "2s", "SJ_CACHE_TIMEOUT": "90s", "SJ_NAMESPACES": "x", "SJ_PROTECT_LEVEL": "0",
        "SJ_STARVATION_AFTER": "1h",
        "SJ_PEERING": "other", "SJ_LEASE_NAMESPACE": "kube-system", "SJ_LIVENESS_PORT": "9000",
        "SJ_MAX_TERMINATION_GRACE": "0", "SJ_MIN_DURATION": "2s", "SJ_WEBHOOK_PORT": "8443",
        "SJ_WEBHOOK_HOST": "192.0.2.2", "SJ_WEBHOOK_SECRET": "other-tls", "SJ_METRICS_PORT": "0",
        "SJ_CLUSTER_DOMAIN": "k8s",
    }, {
        "threshold": 0.5, "start_timeout": 90 * S, "retry_backoff": 1 * M, "max_retry_backoff": 20 * M,
        "tick": 2 * S, "cache_timeout": 90 * S, "namespaces": ("x",), "protect_level": 0, "starvation_after": 60 * M,
        "peering": "other",
        "lease_namespace": "kube-system", "liveness_port": 9000, "max_termination_grace": 0,
        "min_duration": 2 * S, "webhook_port": 8443, "webhook_host": "192.0.2.2", "webhook_secret": "other-tls",
        "metrics_port": 0, "cluster_domain": "k8s",
    }),
    ("flags beat the environment", ["--threshold", "0.8", "--tick", "3s", "--namespaces", "flag-ns"],
     {"SJ_THRESHOLD": "0.4", "SJ_TICK": "9s", "SJ_NAMESPACES": "env-ns"},
     {"threshold": 0.8, "tick": 3 * S, "namespaces": ("flag-ns",)}),
    ("environment used where no flag is given", ["--threshold", "0.8"],
     {"SJ_THRESHOLD": "0.4", "SJ_TICK": "9s", "SJ_PROTECT_LEVEL": "3"},
     {"threshold": 0.8, "tick": 9 * S, "protect_level": 3}),
    ("flag=value form", ["--threshold=1", "--start-timeout=1h30m"], {},
     {"threshold": 1.0, "start_timeout": 90 * M}),
    ("threshold 1 is allowed", ["--threshold", "1.0"], {}, {"threshold": 1.0}),
    ("threshold 0 pauses scavenging", ["--threshold", "0"], {}, {"threshold": 0.0}),
    ("protect level 0 is allowed", ["--protect-level", "0"], {}, {"protect_level": 0}),
    ("launches paced from 400 runs behind by default", [], {}, {"launch_backlog": 400}),
    ("launch backlog 0: launches never wait", ["--launch-backlog", "0"], {}, {"launch_backlog": 0}),
    ("launch backlog from the environment", [], {"SJ_LAUNCH_BACKLOG": "1000"}, {"launch_backlog": 1000}),
    ("namespaces: spaces and empty items dropped", ["--namespaces", "a, b,,c"], {}, {"namespaces": ("a", "b", "c")}),
    ("namespaces from the environment", [], {"SJ_NAMESPACES": " a , b ,, c, "}, {"namespaces": ("a", "b", "c")}),
    ("namespaces: only separators means all", ["--namespaces", " , ,"], {}, {"namespaces": ()}),
    ("schedulers: the cluster's own and another", ["--schedulers", "default-scheduler, volcano"], {},
     {"schedulers": ("default-scheduler", "volcano")}),
    ("schedulers from the environment, without the default one", [], {"SJ_SCHEDULERS": "yunikorn"},
     {"schedulers": ("yunikorn",)}),
    ("lease namespace from POD_NAMESPACE", [], {"POD_NAMESPACE": "scavenger-system"},
     {"lease_namespace": "scavenger-system"}),
    ("--lease-namespace beats POD_NAMESPACE", ["--lease-namespace", "ops"], {"POD_NAMESPACE": "scavenger-system"},
     {"lease_namespace": "ops"}),
    ("-v is --verbose", ["-v"], {}, {"verbose": True}),
    ("a burst pool", ["--pools", "burst:scavenger.dev/pool=burst:1.0"], {},
     {"pools": (asdict(Pool("burst", (("scavenger.dev/pool", "burst"),), 1.0)),)}),
    ("pools from the environment", [], {"SJ_POOLS": "spot:a=b,c=d:0.5;burst:p=b:1"},
     {"pools": (asdict(Pool("spot", (("a", "b"), ("c", "d")), 0.5)), asdict(Pool("burst", (("p", "b"),), 1.0)))}),
    ("a default namespace quota and weight", ["--default-namespace-quota", "cpu=8, memory=32Gi,nvidia.com/gpu=0",
                                              "--default-namespace-weight", "2"], {},
     {"default_namespace_quota": {"cpu": 8000, "memory": 32 * 2**30 * 1000, "nvidia.com/gpu": 0},
      "default_namespace_weight": 2}),
    ("the default namespace quota from the environment", [],
     {"SJ_DEFAULT_NAMESPACE_QUOTA": "cpu=500m", "SJ_DEFAULT_NAMESPACE_WEIGHT": "1000"},
     {"default_namespace_quota": {"cpu": 500}, "default_namespace_weight": 1000}),
]


@pytest.mark.parametrize(("argv", "environ", "expected"), [case[1:] for case in VALID],
                         ids=[case[0] for case in VALID])
def test_valid(argv: list[str], environ: dict[str, str], expected: dict[str, Any]) -> None:
    assert settings(parse_config(argv, environ)) == {**DEFAULTS, **expected}


def test_identity_from_pod_name() -> None:
    assert parse_config([], {"POD_NAME": "scavenger-7d9f-abcde"}).identity == "scavenger-7d9f-abcde"


def test_parsed_config_is_immutable() -> None:
    config = parse_config([], {})
    with pytest.raises(ValidationError):
        config.threshold = 0.1  # type: ignore[misc]


# (setting's flag, its environment variable, invalid value, words the message must contain)
INVALID: list[tuple[str, str, str, str]] = [
    ("--threshold", "SJ_THRESHOLD", "-0.5", "must be within [0, 1]"),
    ("--threshold", "SJ_THRESHOLD", "1.5", "must be within [0, 1]"),
    ("--threshold", "SJ_THRESHOLD", "abc", "valid number"),
    ("--threshold", "SJ_THRESHOLD", "nan", "nan"),
    ("--start-timeout", "SJ_START_TIMEOUT", "0s", "positive duration"),
    ("--start-timeout", "SJ_START_TIMEOUT", "0", "positive duration"),
    ("--start-timeout", "SJ_START_TIMEOUT", "-5s", "positive duration"),
    ("--start-timeout", "SJ_START_TIMEOUT", "soon", "invalid duration 'soon'"),
    ("--start-timeout", "SJ_START_TIMEOUT", "60", "invalid duration '60'"),
    ("--tick", "SJ_TICK", "0s", "positive duration"),
    ("--cache-timeout", "SJ_CACHE_TIMEOUT", "0s", "positive duration"),
    ("--retry-backoff", "SJ_RETRY_BACKOFF", "0s", "positive duration"),
    ("--max-retry-backoff", "SJ_MAX_RETRY_BACKOFF", "-1m", "positive duration"),
    ("--starvation-after", "SJ_STARVATION_AFTER", "later", "invalid duration 'later'"),
    ("--protect-level", "SJ_PROTECT_LEVEL", "-1", "must not be negative"),
    ("--schedulers", "SJ_SCHEDULERS", " , ", "must name at least one scheduler"),
    ("--schedulers", "SJ_SCHEDULERS", "volcano,volcano", "names a scheduler twice"),
    ("--schedulers", "SJ_SCHEDULERS", "Volcano", "'Volcano' is not a scheduler name"),
    ("--schedulers", "SJ_SCHEDULERS", "a b", "'a b' is not a scheduler name"),
    ("--schedulers", "SJ_SCHEDULERS", "x" * 254, "is not a scheduler name"),
    ("--protect-level", "SJ_PROTECT_LEVEL", "1.5", "valid integer"),
    ("--launch-backlog", "SJ_LAUNCH_BACKLOG", "-1", "greater than or equal to 0"),
    ("--launch-backlog", "SJ_LAUNCH_BACKLOG", "many", "valid integer"),
    ("--liveness-port", "SJ_LIVENESS_PORT", "http", "valid integer"),
    ("--max-termination-grace", "SJ_MAX_TERMINATION_GRACE", "-1", "must not be negative"),
    ("--min-duration", "SJ_MIN_DURATION", "1s", "must be longer than 1s"),
    ("--min-duration", "SJ_MIN_DURATION", "soon", "invalid duration 'soon'"),
    ("--webhook-port", "SJ_WEBHOOK_PORT", "0", "greater than or equal to 1"),
    ("--pools", "SJ_POOLS", "burst:1.0", "is not NAME:KEY=VALUE"),
    ("--pools", "SJ_POOLS", "burst:p=b:2", "pool burst: threshold must be within [0, 1]"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", "cluster.local.", "should match pattern"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", ".cluster.local", "should match pattern"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", "Cluster.Local", "should match pattern"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", "cluster..local", "should match pattern"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", "cluster local", "should match pattern"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "cpu", "'cpu': expected RESOURCE=QUANTITY"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "cpu=lots", "'lots' is not a quantity"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "cpu=-1", "'-1' is not a quantity"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "cpu=1,cpu=2", "cpu is given twice"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "bad name=1", "name part must be"),
    ("--default-namespace-weight", "SJ_DEFAULT_NAMESPACE_WEIGHT", "0", "greater than or equal to 1"),
    ("--default-namespace-weight", "SJ_DEFAULT_NAMESPACE_WEIGHT", "1001", "less than or equal to 1000"),
]
INVALID_IDS = [f"{flag} {value}" for flag, _, value, _ in INVALID]


@pytest.mark.parametrize(("flag", "env", "value", "words"), INVALID, ids=INVALID_IDS)
def test_invalid_flag(flag: str, env: str, value: str, words: str) -> None:
    # --flag=value: argparse would take a separate "-5s" for an option of its own.
    with pytest.raises(ConfigError) as err:
        parse_config([f"{flag}={value}"], {})
    message = str(err.value)
    assert flag in message and env in message and words in message
    assert repr(value) in message, "the message shows the value as given"


@pytest.mark.parametrize(("flag", "env", "value", "words"), INVALID, ids=INVALID_IDS)
def test_invalid_environment_variable(flag: str, env: str, value: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config([], {env: value})
    message = str(err.value)
    assert flag in message and env in message and words in message
    assert repr(value) in message


def test_a_valid_flag_does_not_hide_an_invalid_environment_variable() -> None:
    with pytest.raises(ConfigError, match="--tick / SJ_TICK"):
        parse_config(["--threshold", "0.5"], {"SJ_TICK": "never"})


def test_a_valid_flag_overrides_an_invalid_environment_variable() -> None:
    assert parse_config(["--tick", "2s"], {"SJ_TICK": "never"}).tick == 2 * S


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# ----------------------------------------------------------------------------- the command


def run_operator(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m sj_operator` pointed at no cluster: it must stop on its settings before any API call."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SJ_", "KUBERNETES_"))}
    environ.update({"KUBECONFIG": str(REPO / "does-not-exist" / "kubeconfig"), "PYTHONPATH": str(REPO)})
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "sj_operator", *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60, check=False)


def test_command_rejects_an_invalid_flag() -> None:
    proc = run_operator("--threshold", "2")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == ("sj_operator: invalid configuration: --threshold / SJ_THRESHOLD: "
                                   "must be within [0, 1], got 2 (got '2')")


def test_command_rejects_an_invalid_environment_variable() -> None:
    proc = run_operator(env={"SJ_START_TIMEOUT": "soon"})
    assert proc.returncode == 2
    assert "--start-timeout / SJ_START_TIMEOUT" in proc.stderr
    assert "invalid duration 'soon'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_command_rejects_an_unknown_flag() -> None:
    proc = run_operator("--treshold", "0.5")
    assert proc.returncode == 2
    assert "unrecognized arguments: --treshold" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "flag", "env"),
    [
        (["--peering", ""], "--peering", "SJ_PEERING"),
        (["--peering", "Not_A_Name"], "--peering", "SJ_PEERING"),
        (["--lease-namespace", "UPPER"], "--lease-namespace", "SJ_LEASE_NAMESPACE"),
        (["--liveness-port=-3"], "--liveness-port", "SJ_LIVENESS_PORT"),
        (["--liveness-port", "70000"], "--liveness-port", "SJ_LIVENESS_PORT"),
        (["--retry-backoff", "5m", "--max-retry-backoff", "1m"], "--max-retry-backoff", "SJ_MAX_RETRY_BACKOFF"),
        (["--webhook-service", "no-slash"], "--webhook-service", "SJ_WEBHOOK_SERVICE"),
        (["--webhook-host", "a b"], "--webhook-host", "SJ_WEBHOOK_HOST"),
    ],
    ids=["empty-peering", "bad-peering", "bad-lease-namespace", "negative-port", "port-too-high",
         "backoff-cap-below-first", "webhook-service-without-namespace", "webhook-host-with-space"],
)
def test_more_nonsense_is_rejected_naming_flag_and_env(argv: list[str], flag: str, env: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(argv, {})
    assert flag in str(err.value) and env in str(err.value)


@pytest.mark.parametrize("argv", [
    ["--webhook-port", "9443"],
    ["--webhook-port", "9443", "--webhook-service", "ops/x", "--webhook-host", "10.0.0.1"],
], ids=["neither-service-nor-host", "both-service-and-host"])
def test_the_webhook_needs_exactly_one_way_to_be_reached(argv: list[str]) -> None:
    with pytest.raises(ConfigError, match="exactly one of --webhook-service and --webhook-host"):
        parse_config(argv, {})


def test_spec_limits_come_from_the_settings() -> None:
    limits = parse_config(["--max-termination-grace", "45", "--min-duration", "2m"], {}).spec_limits
    assert (limits.max_termination_grace, limits.min_duration) == (45, 2 * M)
