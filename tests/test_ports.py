"""The sandbox tests' port offsets: never a port an outgoing connection could hold."""

from __future__ import annotations

import random
import socket

import pytest

from tests.ports import RESERVED, candidate_offsets, ephemeral_range, free_port_offset, sandbox_ports


def test_outgoing_connections_take_their_local_ports_from_the_ephemeral_range() -> None:
    """The premise, on this kernel: a connection's local port comes from the range the helper avoids."""
    low, high = ephemeral_range()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        clients = [socket.create_connection(server.getsockname()) for _ in range(32)]
        try:
            local = [c.getsockname()[1] for c in clients]
        finally:
            for c in clients:
                c.close()
    assert all(low <= port <= high for port in local), (local, (low, high))


@pytest.mark.parametrize("ephemeral", [ephemeral_range(), (32_768, 60_999), (10_000, 65_535), (49_152, 65_535)])
def test_every_port_of_a_drawn_offset_lies_outside_the_ephemeral_range(ephemeral: tuple[int, int]) -> None:
    low, high = ephemeral
    for seed in range(50):
        offset = free_port_offset(rng=random.Random(seed), ephemeral=ephemeral)
        inside = [p for p in sandbox_ports(offset) if low <= p <= high]
        assert not inside, f"offset {offset}: ports {inside} lie in the ephemeral range {ephemeral}"


def test_no_candidate_shares_a_port_with_the_projects_own_sandboxes() -> None:
    theirs = {p for r in RESERVED for p in sandbox_ports(r, workers=4)}
    candidates = candidate_offsets(ephemeral_range())
    assert candidates, "no candidate offsets on this machine"
    clash = {o: sorted(theirs.intersection(sandbox_ports(o))) for o in candidates if theirs.intersection(sandbox_ports(o))}
    assert not clash, clash


def test_a_range_that_leaves_no_room_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"ephemeral range \(1024, 65535\).*sysctl"):
        free_port_offset(ephemeral=(1024, 65_535))
