#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/<target>/ (docs/fuzzing.md): a few
well-formed messages of each format and a few truncated or hostile ones. The
fuzzers grow their own corpora from these; the files are committed, so this
script only needs rerunning when a format changes. Run from anywhere."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def prefix(magic, kind, version=1):
    return struct.pack("<IHH", magic, version, kind)


# bootstrap wire: first byte selects the decoder (fuzz_bootstrap_wire.cpp)
B = 0x42544441
write("bootstrap_wire", "challenge", b"\x00" + prefix(B, 1) + bytes(range(16)))
write("bootstrap_wire", "hello", b"\x01" + prefix(B, 2) + struct.pack("<II", 3, 4) + b"\x11" * 32)
write("bootstrap_wire", "verdict_refused", b"\x02" + prefix(B, 3) + struct.pack("<II", 0, 12))
write("bootstrap_wire", "frame_contribution", b"\x03" + prefix(B, 4) + struct.pack("<Q", 128))
write("bootstrap_wire", "frame_huge", b"\x04" + prefix(B, 5) + struct.pack("<Q", 1 << 62))
write("bootstrap_wire", "gathered", b"\x05\x00" + struct.pack("<Q", 3) + b"abc")
write("bootstrap_wire", "bad_magic", b"\x00" + prefix(0xDEADBEEF, 1) + bytes(16))
write("bootstrap_wire", "truncated", b"\x01" + prefix(B, 2)[:5])

# unique id: hex text
write("unique_id", "zeros", "0" * 256)
write("unique_id", "short", "abcd")
write("unique_id", "not_hex", "zz" * 128)
write("unique_id", "pattern", "".join("%02x" % (i * 7 % 256) for i in range(128)))

# control frames: first byte selects the reader; frames are magic u32 + length u32 + payload
K = 0x4B544441
frame = struct.pack("<II", K, 5) + b"hello"
write("control_frames", "reader_small_limit", b"\x00" + frame + frame)
write("control_frames", "reader_over_limit", b"\x00" + struct.pack("<II", K, 1000) + b"x" * 10)
write("control_frames", "reader_full", b"\x01" + frame + struct.pack("<II", K, 0))
write("control_frames", "link", b"\x02" + frame)
write("control_frames", "link_partial", b"\x02" + struct.pack("<II", K, 64) + b"abc")
write("control_frames", "bad_magic", b"\x01" + struct.pack("<II", 0x12345678, 4) + b"abcd")

# partial protocol (version 3: dead ranks; deposits, pushes ahead and late answers of
# stale-synchronous defer): first byte = ranks-1 (low 6 bits) | 64 for rank -> arbiter
P = 0x50544441
V = 3
arrival = prefix(P, 1, V) + struct.pack("<iQdddQQBIBQB", 1, 7, 1.0, 0.01, 0.002, 32, 0xABCDEF, 0, 1, 0, 6, 0)
retry = prefix(P, 1, V) + struct.pack("<iQdddQQBIBQB", 2, 7, 1.0, 0.01, 0.002, 32, 0xABCDEF, 2, 2, 1, 6, 1)
finish = prefix(P, 2, V) + struct.pack("<iQQ", 2, 9, 9)
failure = prefix(P, 4, V) + struct.pack("<i", 5) + struct.pack("<I", 6) + b"reason"
decision_head = prefix(P, 3, V) + struct.pack("<QBi", 7, 0, 0) + struct.pack("<I", 2) + \
    struct.pack("<idQ", 0, 1.0, 7) + struct.pack("<idQ", 1, 1.0, 6) + struct.pack("<I", 1) + \
    struct.pack("<iQQQ", 2, 5, 0, 0) + struct.pack("<I", 3) + bytes([0, 1, 5]) + struct.pack("<I", 1)
decision = decision_head + struct.pack("<I", 0) + struct.pack("<I", 0) + struct.pack("<I", 0)
# stale-synchronous: rank 2's deposit landing at rank 0 and discarded at rank 1, this result
# pushed ahead to rank 2, and rank 1 receiving step 6 pushed ahead by rank 0
decision_stale = decision_head + struct.pack("<I", 2) + struct.pack("<iiQdB", 0, 2, 6, 1.0, 0) + \
    struct.pack("<iiQdB", 1, 2, 6, 1.0, 1) + struct.pack("<I", 1) + struct.pack("<i", 2) + \
    struct.pack("<I", 1) + struct.pack("<iQi", 1, 6, 0)
late = prefix(P, 6, V) + struct.pack("<Qii", 6, 0, 1) + struct.pack("<I", 1) + struct.pack("<iQi", 2, 5, 1) + \
    struct.pack("<I", 3) + bytes([0, 3, 2])
abandon = prefix(P, 5, V) + struct.pack("<QIi", 7, 1, 2)
incoming = prefix(P, 7, V) + struct.pack("<I", 1) + struct.pack("<iiQdB", 0, 2, 6, 1.0, 0)
write("partial_protocol", "arrival", bytes([64 | 3]) + arrival)
write("partial_protocol", "arrival_retry", bytes([64 | 3]) + retry)
write("partial_protocol", "finish", bytes([64 | 3]) + finish)
write("partial_protocol", "failure", bytes([3]) + failure)
write("partial_protocol", "decision", bytes([3]) + decision)
write("partial_protocol", "abandon", bytes([3]) + abandon)
write("partial_protocol", "decision_stale_synchronous", bytes([3]) + decision_stale)
write("partial_protocol", "late", bytes([3]) + late)
write("partial_protocol", "incoming", bytes([3]) + incoming)
write("partial_protocol", "arrival_bad_rank", bytes([64 | 0]) + arrival)

# coordinator wire: first byte selects the decoder (fuzz_coordinator_wire.cpp)
C = 0x43544441
CV = 4  # the coordinator protocol's version (scheduler/coordinator/wire.hpp kVersion)
write("coordinator_wire", "peek", b"\x00" + prefix(C, 10, CV) + struct.pack("<Q", 1))
write("coordinator_wire", "challenge", b"\x01" + prefix(C, 1, CV) + bytes(16))
write("coordinator_wire", "hello", b"\x02" + prefix(C, 2, CV) + struct.pack("<IIIQB", 1, 4, 0, 1, 0) + b"\x22" * 32)
write("coordinator_wire", "welcome", b"\x03" + prefix(C, 3, CV) + struct.pack("<B", 1) + struct.pack("<I", 0) +
      struct.pack("<QQ", 1, 0))
for kind, body, name in [(10, struct.pack("<QQ", 3, 64), "plan_request"), (13, struct.pack("<Q", 64), "fetch"),
                         (15, struct.pack("<Q", 5), "commit"), (16, struct.pack("<Q", 5), "give_back"),
                         (17, b"", "request_restart"), (19, struct.pack("<Q", 2), "join_generation"),
                         (21, b"\x01", "bye"), (12, struct.pack("<QdddQB", 3, 0.1, 0.0, 0.01, 32, 0), "report"),
                         (18, struct.pack("<Q", 2) + bytes(128), "offer_id")]:
    write("coordinator_wire", "request_" + name, b"\x04" + prefix(C, kind, CV) + body)
# plan: step, local batch, micro-batches, micro-batch, late, staleness, restart, resplit, stop, generation,
# then a batch (flag 1: status, lease, epoch, count, ids)
write("coordinator_wire", "plan_with_batch", b"\x05" + prefix(C, 11, CV) + struct.pack("<QQIQBIBBBQ", 3, 2, 1, 2, 2, 1, 0, 0, 0, 1) +
      b"\x01" + struct.pack("<BQIQ", 0, 9, 1, 2) + struct.pack("<QQ", 4, 5))
write("coordinator_wire", "batch", b"\x06" + prefix(C, 14, CV) + struct.pack("<BQI", 0, 9, 1) + struct.pack("<Q", 3) +
      struct.pack("<QQQ", 1, 2, 3))
write("coordinator_wire", "batch_huge_count", b"\x06" + prefix(C, 14, CV) + struct.pack("<BQI", 0, 9, 1) +
      struct.pack("<Q", 1 << 60))
write("coordinator_wire", "generation_id", b"\x07" + prefix(C, 20, CV) + struct.pack("<BQ", 1, 2) + bytes(128) +
      struct.pack("<III", 2, 0, 3))
write("coordinator_wire", "request_comm_failed", b"\x04" + prefix(C, 24, CV) + struct.pack("<QQI", 1, 7, 1) +
      struct.pack("<I", 2))
write("coordinator_wire", "ack", b"\x08" + prefix(C, 22, CV) + b"\x01")
write("coordinator_wire", "error", b"\x09" + prefix(C, 23, CV) + struct.pack("<i", 3) + struct.pack("<I", 4) + b"oops")
# the arbiter link's hello and answer (collectives/partial/arbiter_link.cpp), read by the coordinator's listener
A = 0x41544441
who = b"pid 7 on host h"
arbiter_hello = (prefix(A, 1) + bytes(range(16)) + struct.pack("<II", 1, 4) + struct.pack("<I", len(who)) + who +
                 struct.pack("<QddIQddId", 8, 0.5, 0.0, 5, 64, 0.3, 1.5, 10, 2.0) + b"\x33" * 32)
write("coordinator_wire", "arbiter_hello", b"\x0a" + arbiter_hello)
write("coordinator_wire", "arbiter_hello_rank_out_of_range",
      b"\x0a" + arbiter_hello[:24] + struct.pack("<II", 4, 4) + arbiter_hello[32:])
write("coordinator_wire", "arbiter_answer", b"\x0b" + prefix(A, 2) + b"\x00" + struct.pack("<I", 4) + b"full")

# device peer record: magic, flags, node, two IPC handles, 96-byte reason
handle_bytes = 4 + 2 + 2 + 64 + 8 + 8 + 8 + 8 + 4 + 4
record = struct.pack("<IIQ", 0x52504441, 0, 42) + bytes(2 * handle_bytes) + b"not exported".ljust(96, b"\x00")
write("peer_record", "not_exportable", record)
write("peer_record", "flags_all", struct.pack("<IIQ", 0x52504441, 0xFFFFFFFF, 1) + bytes(2 * handle_bytes) + bytes(96))
write("peer_record", "short", record[:40])
write("peer_record", "reason_unterminated", record[:-96] + b"r" * 96)

# UCX abort message: first byte = ranks-1; magic u32, version u16, reserved u16, origin, status, reason length
def abort_message(origin, status, reason, magic=0x41445441, version=1):
    return struct.pack("<IHHIII", magic, version, 0, origin, status, len(reason)) + reason


write("transport_messages", "abort", b"\x03" + abort_message(1, 7, b"rank 1 aborted"))
write("transport_messages", "abort_origin_out_of_range", b"\x01" + abort_message(9, 7, b""))
write("transport_messages", "abort_long_length", b"\x03" + struct.pack("<IHHIII", 0x41445441, 1, 0, 0, 1, 1 << 31))

# DDS checkpoint: JSON text (the checksum of the first is wrong on purpose; the fuzzer learns the rest)
ck = {"format": "antdt-dds", "version": 1, "checksum": "0000000000000000",
      "dataset": {"samples": 100}, "options": {"world_size": 2, "shard_size": 10, "seed": 1, "shuffle": "none",
                                               "epochs": 1, "steal_min": 1},
      "state": {"epoch": 0, "finished": False, "fresh": 0, "next_shard_id": 0}}
write("dds_checkpoint", "bad_checksum", json.dumps(ck))
write("dds_checkpoint", "files_dataset", json.dumps(dict(ck, dataset={"files": [{"name": "a", "records": 5}]})))
write("dds_checkpoint", "deep", "[" * 5000 + "]" * 5000)
write("dds_checkpoint", "not_json", "{\"format\": ")
# Well-formed head, then 100 000 nested arrays: reaches the checksum's dump() (a stack overflow before the depth limit).
write("dds_checkpoint", "deep_after_head",
      '{"format": "antdt-dds", "version": 1, "checksum": "0", "x": ' + "[" * 100000 + "]" * 100000 + "}")

# ANTDT_INJECT: first byte = ranks-1 (low 4 bits)
write("inject", "slow", b"\x03rank=2:slow=3")
write("inject", "spikes", b"\x07rank=*:spike_p=0.1,spike_x=5,spike_len=1;rank=1:slow=4,from_step=30;seed=7")
write("inject", "range", b"\x07rank=1-3:delay_us=200,bw_mbps=100,incarnation=0")
write("inject", "bad_key", b"\x01rank=0:nope=1")
write("inject", "rank_out_of_range", b"\x00rank=5:slow=2")

# ANTDT_POLICY_CONFIG: JSON text
write("policy_config", "empty", "")
write("policy_config", "object", json.dumps({"period": 10, "threshold": 1.5}))
write("policy_config", "not_object", "[1, 2, 3]")
write("policy_config", "deep", "{\"a\":" * 200 + "1" + "}" * 200)
write("policy_config", "syntax", "{\"a\": ")
