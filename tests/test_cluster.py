"""The simulated cluster (shared/cluster.py): messages, rounds, copies, the ledger and its time.

Parts 5 to 7 build their collectives on it, so its accounting is checked here
on its own: every byte and message sent is counted once for the sender and
once for the receiver, rounds count only when something travels, a received
array shares memory with nothing, and the alpha-beta estimate is the sum over
rounds of the busiest link's time.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.cluster import DEFAULT_LATENCY, DEFAULT_SECONDS_PER_BYTE, SUMMARY_KEYS, Cluster, Message

pytestmark = pytest.mark.part_5


def test_a_message_arrives_after_its_round_as_a_copy():
    cluster = Cluster(2)
    x = np.arange(6.0).reshape(2, 3)
    with cluster.round():
        cluster.send(0, 1, x)
        x[0, 0] = 99.0  # what worker 0 does after sending does not change the message
    y = cluster.receive(1, 0)
    assert y.shape == (2, 3) and y.dtype == np.float64
    assert y[0, 0] == 0.0 and np.array_equal(y[1], [3.0, 4.0, 5.0])
    assert not np.shares_memory(x, y) and not y.flags.writeable  # a message is what was sent: read-only


def test_a_ring_of_sends_gives_every_worker_an_array_no_one_else_holds():
    cluster = Cluster(4)
    arrays = [np.full(3, float(r)) for r in range(4)]
    with cluster.round():
        for r in range(4):
            cluster.send(r, (r + 1) % 4, arrays[r])
    received = [cluster.receive(r, (r - 1) % 4) for r in range(4)]
    assert [float(a[0]) for a in received] == [3.0, 0.0, 1.0, 2.0]
    for i, a in enumerate(received):
        assert not any(np.shares_memory(a, b) for b in arrays)
        assert not any(np.shares_memory(a, b) for j, b in enumerate(received) if j != i)


def test_the_ledger_counts_bytes_and_messages_per_worker_and_rounds():
    cluster = Cluster(3)
    with cluster.round():
        cluster.send(1, 0, np.zeros(4))                  # 32 bytes
        cluster.send(2, 0, np.zeros(4, dtype=np.float32))  # 16 bytes
    with cluster.round():
        cluster.send(0, 2, np.zeros((2, 5)))             # 80 bytes
    assert cluster.ledger.summary() == {
        "bytes_sent": [80, 32, 16], "bytes_received": [48, 0, 80],
        "messages_sent": [1, 1, 1], "messages_received": [2, 0, 1], "rounds": 2}
    assert tuple(cluster.ledger.summary()) == SUMMARY_KEYS
    assert all(type(n) is int for key in SUMMARY_KEYS[:4] for n in cluster.ledger.summary()[key])
    assert cluster.ledger.messages == (Message(0, 1, 0, 32), Message(0, 2, 0, 16), Message(1, 0, 2, 80))
    assert cluster.unreceived() == 3


def test_the_ledger_records_only_what_was_sent():
    """The grader reads a ledger after the learner's function ran: sending is the only public way to write in it."""
    cluster = Cluster(2)
    with cluster.round():
        cluster.send(0, 1, np.zeros(2))
    public = [name for name in dir(cluster.ledger) if not name.startswith("_")]
    assert "record_round" not in public
    cluster.ledger.messages + (Message(5, 0, 1, 10**9),)  # a new tuple: the ledger's record is untouched
    with pytest.raises(AttributeError):
        cluster.ledger.rounds = 0
    with pytest.raises(AttributeError):
        cluster.ledger = None
    with pytest.raises(AttributeError):
        cluster.workers.append(None)
    assert cluster.ledger.summary()["bytes_sent"] == [16, 0] and cluster.ledger.rounds == 1


def test_an_empty_round_is_not_a_round_and_a_failed_round_sends_nothing():
    cluster = Cluster(2)
    with cluster.round():
        pass
    with pytest.raises(KeyError):
        with cluster.round():
            cluster.send(0, 1, np.ones(2))
            raise KeyError("the worker crashed")
    assert cluster.ledger.rounds == 0 and cluster.ledger.messages == ()
    with pytest.raises(RuntimeError, match="no message"):
        cluster.receive(1, 0)


def test_a_message_holds_numbers_whose_bytes_the_ledger_counts():
    """Every dtype of numbers is sent and counted at its nbytes; an array of any other kind is refused: an
    object array's nbytes counts pointers (one 8-byte pointer to an 8 MB array), a string's is not traffic
    any lesson sends."""
    cluster = Cluster(2)
    numbers = [np.zeros(3, dtype) for dtype in (bool, np.int8, np.uint16, np.float16, np.float32, np.complex64)]
    with cluster.round():
        for array in numbers:
            cluster.send(0, 1, array)
    assert cluster.ledger.summary()["bytes_sent"] == [sum(array.nbytes for array in numbers), 0]
    wrapped = np.empty(1, dtype=object)
    wrapped[0] = np.zeros(1_000_000)
    for array in (wrapped, np.array(["abc"]), np.zeros(2, dtype=[("x", "f8")]), np.zeros(2, "datetime64[s]")):
        with pytest.raises(TypeError, match="arrays of numbers"):
            with cluster.round():
                cluster.send(0, 1, array)
    assert cluster.ledger.summary()["bytes_sent"] == [sum(array.nbytes for array in numbers), 0]


def test_messages_between_two_workers_arrive_in_order():
    cluster = Cluster(2)
    for value in (1.0, 2.0):
        with cluster.round():
            cluster.send(0, 1, np.array([value]))
    assert [float(cluster.receive(1, 0)[0]) for _ in range(2)] == [1.0, 2.0]
    assert cluster.unreceived() == 0


def test_misuse_is_refused_with_a_message_that_says_what_to_do():
    cluster = Cluster(3)
    with pytest.raises(RuntimeError, match="inside a round"):
        cluster.send(0, 1, np.ones(2))
    with cluster.round():
        cluster.send(0, 1, np.ones(2))
        with pytest.raises(RuntimeError, match="still in flight"):
            cluster.receive(1, 0)
        with pytest.raises(RuntimeError, match="do not nest"):
            with cluster.round():
                pass
        with pytest.raises(ValueError, match="itself"):
            cluster.send(2, 2, np.ones(2))
        with pytest.raises(ValueError, match="not a worker"):
            cluster.send(0, 3, np.ones(2))
        with pytest.raises(TypeError, match="NumPy arrays"):
            cluster.send(0, 1, [1.0, 2.0])
        with pytest.raises(TypeError, match="rank"):
            cluster.send(0, 1.0, np.ones(2))
    with pytest.raises(RuntimeError, match="no message from worker 2"):
        cluster.receive(1, 2)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="at least one worker"):
            Cluster(bad)
    with pytest.raises(TypeError):
        Cluster(2.0)
    with pytest.raises(ValueError):
        Cluster(2, latency=-1.0)


def test_every_worker_has_its_own_state():
    cluster = Cluster(3)
    cluster.workers[0].state["params"] = np.ones(2)
    assert [w.rank for w in cluster.workers] == [0, 1, 2]
    assert cluster.workers[1].state == {} and cluster.workers[0].state is not cluster.workers[1].state


def test_the_alpha_beta_time_is_the_busiest_link_of_each_round_summed():
    alpha, beta = 1e-3, 1e-6
    cluster = Cluster(3, latency=alpha, seconds_per_byte=beta)
    with cluster.round():                        # worker 0 receives two messages: its link is the busiest
        cluster.send(1, 0, np.zeros(100))        # 800 bytes
        cluster.send(2, 0, np.zeros(50))         # 400 bytes
    with cluster.round():                        # sends and receives run at the same time (full duplex)
        cluster.send(0, 1, np.zeros(10))
        cluster.send(1, 0, np.zeros(20))
    first = 2 * alpha + 1200 * beta
    second = alpha + 160 * beta
    assert cluster.ledger.round_seconds(alpha, beta) == pytest.approx([first, second], rel=1e-12)
    assert cluster.estimated_seconds() == pytest.approx(first + second, rel=1e-12)
    assert Cluster(2).estimated_seconds() == 0.0
    default = Cluster(2)
    with default.round():
        default.send(0, 1, np.zeros(125))        # 1000 bytes
    assert default.estimated_seconds() == pytest.approx(DEFAULT_LATENCY + 1000 * DEFAULT_SECONDS_PER_BYTE)


@pytest.mark.parametrize("N", [2, 3, 5, 8])
def test_gather_and_broadcast_through_a_root_cost_two_N_minus_one_messages_at_the_root(N):
    """The accounting the notebook relies on: the naive all-reduce's bill, sent by hand."""
    S = 1000
    cluster = Cluster(N)
    with cluster.round():
        for r in range(1, N):
            cluster.send(r, 0, np.zeros(S // 8))
    for r in range(1, N):
        cluster.receive(0, r)
    with cluster.round():
        for r in range(1, N):
            cluster.send(0, r, np.zeros(S // 8))
    summary = cluster.ledger.summary()
    assert summary["bytes_sent"][0] + summary["bytes_received"][0] == 2 * (N - 1) * S
    assert summary["messages_sent"][0] == summary["messages_received"][0] == N - 1
    assert cluster.estimated_seconds() == pytest.approx(2 * (N - 1) * (DEFAULT_LATENCY + S * DEFAULT_SECONDS_PER_BYTE))


def test_the_ledger_prints_a_table():
    cluster = Cluster(2)
    with cluster.round():
        cluster.send(0, 1, np.zeros(1000))
    text = cluster.ledger.table()
    assert "8,000" in text and "rounds: 1" in text
    assert repr(cluster) == "Cluster(2 workers, 1 messages in 1 rounds)"


# --------------------------------------------------------------------------
# the all-reduces' input check (given in lessons 027 and 028)
# --------------------------------------------------------------------------

def test_the_all_reduce_input_is_one_array_per_worker_of_one_shape_and_dtype():
    from shared.cluster import check_worker_arrays
    check_worker_arrays([np.zeros(3), np.ones(3)])
    check_worker_arrays([np.zeros((2, 2))])
    with pytest.raises(ValueError, match="worker_arrays is empty"):
        check_worker_arrays([])
    with pytest.raises(ValueError, match=r"worker 2's array is float64 \(4,\), worker 0's is float64 \(3,\)"):
        check_worker_arrays([np.zeros(3), np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError, match=r"worker 1's array is float32 \(3,\), worker 0's is float64 \(3,\)"):
        check_worker_arrays([np.zeros(3), np.zeros(3, np.float32)])
