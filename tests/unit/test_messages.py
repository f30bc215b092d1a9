"""Messages that tell the user what to do: the rate's bounds, a read refused by the kernel
(the capabilities the target holds and sidecar lacks, named), ticks that read no sample put in
proportion."""

from __future__ import annotations

from sidecar.access import Tracing, capability_names, explain_denied, missing_capabilities
from sidecar.defaults import rate_problem
from sidecar.sample.sampler import errors_note, torn_note
from tests.support.helpers import sidecar

STATUS = "Name:\tapp\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapPrm:\t{prm}\nCapEff:\t{prm}\n"


def test_the_rate_says_its_bounds_and_default() -> None:
    assert rate_problem(100) is None and rate_problem(10_000) is None
    assert rate_problem(0) == (
        "--rate 0: the rate is samples per second, more than 0 and at most 10,000 (default 100)"
    )
    assert rate_problem(20_000) is not None and rate_problem(float("nan")) is not None
    result = sidecar("record", "-p", "1", "-r", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"sidecar: error: {rate_problem(0)}"]


def test_the_capabilities_a_target_holds_and_sidecar_lacks_are_named() -> None:
    target = STATUS.format(uid=0, prm="000001ffffffffff")
    own = STATUS.format(uid=0, prm="000001fffeffffff")  # all but bit 24
    missing = missing_capabilities(target, own)
    assert capability_names(missing) == ["CAP_SYS_RESOURCE"]
    assert missing_capabilities(own, target) == 0
    assert capability_names(1 << 19 | 1 << 45) == ["CAP_SYS_PTRACE", "CAP_45"]


def test_a_few_unread_ticks_are_put_in_proportion() -> None:
    note = errors_note(4, 500, False, "failed to read the target's memory (0 of 38 bytes)")
    assert note == (
        "4 of 500 ticks could not be read (0.8%), each a sample missed: reads torn by stacks "
        "that changed under them are expected on a busy target (last: failed to read the "
        "target's memory (0 of 38 bytes))"
    )
    assert errors_note(0, 500, False, "?") is None
    # from 5% on, the torn-reads note says more (and --blocking), and this one is silent
    assert torn_note(30, 500, False) is not None and errors_note(30, 500, False, "?") is None


def test_a_refused_read_says_what_to_grant() -> None:
    """Root in a container that lacks one of the host's capabilities, reading the host's init:
    that capability named. Without CAP_SYS_PTRACE: CAP_SYS_PTRACE, which lifts the rule, and
    another user's process says so. Nothing known to say: None (the caller's words stand)."""
    host_init = STATUS.format(uid=0, prm="000001ffffffffff")
    container_root = STATUS.format(uid=0, prm="000001fffeffffff")
    bare = STATUS.format(uid=0, prm="0000000000000000")
    with_ptrace, without = Tracing(True, 0, None), Tracing(False, 0, None)
    said = explain_denied(host_init, container_root, with_ptrace, 0)
    assert said is not None and "(CAP_SYS_RESOURCE)" in said and "grant the sidecar" in said
    said = explain_denied(host_init, bare, without, 0)
    assert said is not None and said.startswith("it holds 41 capabilities this sidecar lacks")
    assert "grant sidecar CAP_SYS_PTRACE" in said and "shareProcessNamespace" in said
    other = STATUS.format(uid=1001, prm="0000000000000000")
    said = explain_denied(other, bare, without, 0)
    assert said is not None and said.startswith("it runs as UID 1001 and this sidecar as UID 0")
    assert explain_denied(bare, bare, with_ptrace, 0) is None
    assert explain_denied(bare, bare, Tracing(True, 0, 3), 0) == (
        "Yama ptrace_scope 3 forbids all tracing on this machine"
    )
