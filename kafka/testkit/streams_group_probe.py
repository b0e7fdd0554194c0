#!/usr/bin/env python3
"""Hand-encoded KIP-1071 streams-group client probe (stdlib only).

Joins a streams group on a real broker with StreamsGroupHeartbeat (API key 88),
heartbeats until it owns tasks, describes the group with StreamsGroupDescribe
(API key 89), and optionally leaves (member epoch -1). It exists to check the
wire layout written down in docs/kafka-streams-group-protocol.md against a
real Kafka 4.4 broker before the Rust encoder is written; with --hexdump it
prints the exact request bytes, which make good golden vectors for Rust tests.

Usage:
  streams_group_probe.py --bootstrap 127.0.0.1:PORT --group APP --source-topic T
                         [--changelog APP-store-changelog] [--rounds N]
                         [--commit OFFSET] [--leave] [--hexdump]

Assumes a single-node cluster: it sends FindCoordinator (key 10, v6, KeyType 0
= group) until the coordinator is available (the first one creates
__consumer_offsets), then talks to the bootstrap broker.
"""
import argparse
import json
import socket
import struct
import sys
import time
import uuid

API_OFFSET_COMMIT = 8
API_FIND_COORDINATOR = 10
API_STREAMS_GROUP_HEARTBEAT = 88
API_STREAMS_GROUP_DESCRIBE = 89


# ---------------------------------------------------------------- encoding
class W:
    """Writer for the flexible ("compact") encodings."""

    def __init__(self):
        self.b = bytearray()

    def i8(self, v): self.b += struct.pack(">b", v); return self
    def i16(self, v): self.b += struct.pack(">h", v); return self
    def u16(self, v): self.b += struct.pack(">H", v); return self
    def i32(self, v): self.b += struct.pack(">i", v); return self
    def i64(self, v): self.b += struct.pack(">q", v); return self
    def boolean(self, v): self.b += b"\x01" if v else b"\x00"; return self

    def uvarint(self, v):
        while v >= 0x80:
            self.b.append((v & 0x7F) | 0x80)
            v >>= 7
        self.b.append(v)
        return self

    def cstr(self, s):
        """COMPACT_(NULLABLE_)STRING: uvarint(len+1), 0 = null."""
        if s is None:
            return self.uvarint(0)
        e = s.encode()
        self.uvarint(len(e) + 1)
        self.b += e
        return self

    def carray(self, items, fn):
        """COMPACT_(NULLABLE_)ARRAY: uvarint(n+1), 0 = null."""
        if items is None:
            return self.uvarint(0)
        self.uvarint(len(items) + 1)
        for it in items:
            fn(self, it)
        return self

    def tags(self):
        """Empty tagged-field section: uvarint(0)."""
        return self.uvarint(0)


class R:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        if len(v) != n:
            raise ValueError(f"short buffer at {self.p}")
        self.p += n
        return v

    def i8(self): return struct.unpack(">b", self.take(1))[0]
    def i16(self): return struct.unpack(">h", self.take(2))[0]
    def u16(self): return struct.unpack(">H", self.take(2))[0]
    def i32(self): return struct.unpack(">i", self.take(4))[0]
    def i64(self): return struct.unpack(">q", self.take(8))[0]
    def boolean(self): return self.take(1) != b"\x00"

    def uvarint(self):
        v = shift = 0
        while True:
            c = self.take(1)[0]
            v |= (c & 0x7F) << shift
            if c < 0x80:
                return v
            shift += 7

    def cstr(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def carray(self, fn):
        n = self.uvarint()
        return None if n == 0 else [fn(self) for _ in range(n - 1)]

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()              # tag
            self.take(self.uvarint())   # size + payload (skipped)

    def nullable_struct(self, fn):
        return None if self.i8() < 0 else fn(self)


# ------------------------------------------------------------- transport
class Conn:
    def __init__(self, bootstrap, hexdump=False):
        host, port = bootstrap.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0
        self.hexdump = hexdump

    def call(self, api_key, version, body: bytes) -> R:
        self.corr += 1
        h = W().i16(api_key).i16(version).i32(self.corr)
        cid = b"riffle-probe"
        h.i16(len(cid)); h.b += cid     # header v2: client_id is a *non-compact* nullable string
        h.tags()
        frame = bytes(h.b) + body
        if self.hexdump:
            print(f"# request api={api_key} v{version} ({len(frame)} bytes, without the size prefix)")
            print(frame.hex())
        self.s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._recv(4))[0]
        r = R(self._recv(size))
        corr = r.i32()                  # response header v1: correlation id + tagged fields
        assert corr == self.corr, (corr, self.corr)
        r.tags()
        return r

    def _recv(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)


# -------------------------------------------------------- FindCoordinator
def find_coordinator(c: "Conn", group, version=6, timeout_s=30):
    """FindCoordinator v6 (KeyType 0 = group); retries while it says 15/14."""
    deadline = time.time() + timeout_s
    while True:
        body = W().i8(0).carray([group], lambda w, g: w.cstr(g)).tags()
        r = c.call(API_FIND_COORDINATOR, version, bytes(body.b))
        r.i32()  # ThrottleTimeMs

        def coord(r):
            x = {"key": r.cstr(), "node_id": r.i32(), "host": r.cstr(), "port": r.i32(),
                 "error_code": r.i16(), "error_message": r.cstr()}
            r.tags(); return x
        co = r.carray(coord)[0]
        r.tags()
        if co["error_code"] == 0:
            return co
        if co["error_code"] not in (14, 15) or time.time() > deadline:
            raise RuntimeError(f"FindCoordinator: {co}")
        time.sleep(0.2)


# --------------------------------------------------- StreamsGroupHeartbeat
def task_ids(w, t):
    w.cstr(t["subtopology"]).carray(t["partitions"], lambda w, p: w.i32(p)).tags()


def kv(w, p):
    w.cstr(p[0]).cstr(p[1]).tags()


def topic_info(w, t):
    w.cstr(t["name"]).i32(t.get("partitions", 0)).i16(t.get("replication_factor", 0))
    w.carray(t.get("configs", []), kv).tags()


def subtopology(w, s):
    w.cstr(s["id"])
    w.carray(s["source_topics"], lambda w, t: w.cstr(t))
    w.carray([], lambda w, t: w.cstr(t))                      # SourceTopicRegex (unsupported: keep empty)
    w.carray(s.get("state_changelog_topics", []), topic_info)
    w.carray(s.get("repartition_sink_topics", []), lambda w, t: w.cstr(t))
    w.carray(s.get("repartition_source_topics", []), topic_info)
    w.carray(s.get("copartition_groups", []), lambda w, g: (
        w.carray(g.get("source_topics", []), lambda w, i: w.i16(i)),
        w.carray(g.get("source_topic_regex", []), lambda w, i: w.i16(i)),
        w.carray(g.get("repartition_source_topics", []), lambda w, i: w.i16(i)),
        w.tags()))
    w.tags()


def heartbeat_request(group, member_id, epoch, *, topology=None, rebalance_timeout_ms=-1,
                      owned=None, process_id=None, client_tags=None,
                      task_offsets=None, task_end_offsets=None):
    """StreamsGroupHeartbeatRequest v0/v1 (identical bodies)."""
    w = W()
    w.cstr(group).cstr(member_id).i32(epoch)
    w.i32(0)                     # EndpointInformationEpoch
    w.cstr(None)                 # InstanceId (null: dynamic member / unchanged)
    w.cstr(None)                 # RackId
    w.i32(rebalance_timeout_ms)  # -1 = unchanged; required on join
    if topology is None:
        w.i8(-1)                 # nullable struct: -1 = null
    else:
        w.i8(1)                  # 1 = present, then the struct
        w.i32(topology["epoch"]).carray(topology["subtopologies"], subtopology).tags()
    for kind in ("active", "standby", "warmup"):
        w.carray(None if owned is None else owned.get(kind, []), task_ids)
    w.cstr(process_id)
    w.i8(-1)                     # UserEndpoint: null (no interactive queries)
    w.carray(client_tags, kv)
    w.carray(task_offsets, lambda w, t: w.cstr(t[0]).i32(t[1]).i64(t[2]).tags())
    w.carray(task_end_offsets, lambda w, t: w.cstr(t[0]).i32(t[1]).i64(t[2]).tags())
    w.boolean(False)             # ShutdownApplication
    w.tags()
    return bytes(w.b)


def read_task_ids(r):
    t = {"subtopology": r.cstr(), "partitions": r.carray(lambda r: r.i32())}
    r.tags()
    return t


def read_endpoint(r):
    e = {"host": r.cstr(), "port": r.u16()}
    r.tags()
    return e


def heartbeat_response(r: R, version: int):
    d = {"throttle_time_ms": r.i32(), "error_code": r.i16(), "error_message": r.cstr(),
         "member_id": r.cstr(), "member_epoch": r.i32(), "heartbeat_interval_ms": r.i32()}
    if version == 0:
        d["acceptable_recovery_lag_legacy"] = r.i32()
    d["task_offset_interval_ms"] = r.i32()
    if version >= 1:
        d["acceptable_recovery_lag"] = r.i64()

    def status(r):
        s = {"code": r.i8(), "detail": r.cstr()}
        r.tags()
        return s
    d["status"] = r.carray(status)
    for kind in ("active_tasks", "standby_tasks", "warmup_tasks"):
        d[kind] = r.carray(read_task_ids)
    if version >= 1:
        d["topology_description_required"] = r.boolean()
    d["endpoint_information_epoch"] = r.i32()

    def tp(r):
        x = {"topic": r.cstr(), "partitions": r.carray(lambda r: r.i32())}
        r.tags()
        return x

    def e2p(r):
        x = {"endpoint": read_endpoint(r), "active": r.carray(tp), "standby": r.carray(tp)}
        r.tags()
        return x
    d["partitions_by_user_endpoint"] = r.carray(e2p)
    r.tags()
    assert r.p == len(r.b), f"{len(r.b) - r.p} trailing bytes in heartbeat response"
    return d


# ------------------------------------------------------- OffsetCommit v9
def offset_commit(c: "Conn", group, member_id, epoch, topic, offsets: dict):
    """OffsetCommit v9 (flexible, topic names) as a streams-group member.

    Returns {partition: error_code}."""
    w = W().cstr(group).i32(epoch).cstr(member_id).cstr(None)   # GroupInstanceId null
    w.carray([topic], lambda w, t: (
        w.cstr(t),
        w.carray(sorted(offsets.items()), lambda w, po: (
            w.i32(po[0]).i64(po[1]).i32(-1).cstr(None).tags())),   # leader epoch -1, metadata null
        w.tags()))
    w.tags()
    r = c.call(API_OFFSET_COMMIT, 9, bytes(w.b))
    r.i32()  # ThrottleTimeMs
    out = {}

    def part(r):
        partition = r.i32()
        out[partition] = r.i16()
        r.tags()

    def top(r):
        r.cstr(); r.carray(part); r.tags()
    r.carray(top)
    r.tags()
    return out


# ---------------------------------------------------- StreamsGroupDescribe
def describe_request(groups, version):
    w = W().carray(groups, lambda w, g: w.cstr(g)).boolean(False)  # IncludeAuthorizedOperations
    if version >= 1:
        w.boolean(False)                                             # IncludeTopologyDescription
    return bytes(w.tags().b)


def describe_response(r: R, version: int):
    def read_kv(r):
        x = (r.cstr(), r.cstr()); r.tags(); return x

    def read_topic_info(r):
        x = {"name": r.cstr(), "partitions": r.i32(), "replication_factor": r.i16(),
             "configs": r.carray(read_kv)}
        r.tags(); return x

    def read_subtopology(r):
        x = {"id": r.cstr(), "source_topics": r.carray(lambda r: r.cstr()),
             "repartition_sink_topics": r.carray(lambda r: r.cstr()),
             "state_changelog_topics": r.carray(read_topic_info),
             "repartition_source_topics": r.carray(read_topic_info)}
        r.tags(); return x

    def read_topology(r):
        x = {"epoch": r.i32(), "subtopologies": r.carray(read_subtopology)}
        r.tags(); return x

    def read_task_offset(r):
        x = (r.cstr(), r.i32(), r.i64()); r.tags(); return x

    def read_assignment(r):
        x = {"active": r.carray(read_task_ids), "standby": r.carray(read_task_ids),
             "warmup": r.carray(read_task_ids)}
        r.tags(); return x

    def read_member(r):
        x = {"member_id": r.cstr(), "member_epoch": r.i32(), "instance_id": r.cstr(),
             "rack_id": r.cstr(), "client_id": r.cstr(), "client_host": r.cstr(),
             "topology_epoch": r.i32(), "process_id": r.cstr(),
             "user_endpoint": r.nullable_struct(read_endpoint),
             "client_tags": r.carray(read_kv), "task_offsets": r.carray(read_task_offset),
             "task_end_offsets": r.carray(read_task_offset),
             "assignment": read_assignment(r), "target_assignment": read_assignment(r),
             "is_classic": r.boolean()}
        r.tags(); return x

    def read_group(r):
        x = {"error_code": r.i16(), "error_message": r.cstr(), "group_id": r.cstr(),
             "state": r.cstr(), "group_epoch": r.i32(), "assignment_epoch": r.i32(),
             "topology": r.nullable_struct(read_topology), "members": r.carray(read_member),
             "authorized_operations": r.i32()}
        if version >= 1:
            x["topology_description"] = r.nullable_struct(lambda r: "(not decoded)")
            x["topology_description_status"] = r.i8()
            x["assignor_name"] = r.cstr()
        r.tags(); return x

    d = {"throttle_time_ms": r.i32(), "groups": r.carray(read_group)}
    r.tags()
    assert r.p == len(r.b), f"{len(r.b) - r.p} trailing bytes in describe response"
    return d


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--source-topic", required=True)
    ap.add_argument("--changelog", help="state changelog topic name (default GROUP-store-changelog)")
    ap.add_argument("--version", type=int, default=1, help="StreamsGroupHeartbeat/Describe version (0 or 1)")
    ap.add_argument("--rounds", type=int, default=20, help="max heartbeats while waiting for tasks")
    ap.add_argument("--commit", type=int, metavar="OFFSET",
                    help="commit OFFSET for every owned partition with OffsetCommit v9 (plus two rejected commits)")
    ap.add_argument("--leave", action="store_true", help="leave the group (epoch -1) at the end")
    ap.add_argument("--member-id", help="member id (default: a random UUID, as clients do)")
    ap.add_argument("--process-id", help="process id (default: a random UUID)")
    ap.add_argument("--hexdump", action="store_true", help="print request bytes in hex")
    a = ap.parse_args()

    c = Conn(a.bootstrap, a.hexdump)
    print("coordinator ->", json.dumps(find_coordinator(c, a.group)))
    member_id = a.member_id or str(uuid.uuid4())
    process_id = a.process_id or str(uuid.uuid4())
    topology = {"epoch": 0, "subtopologies": [{
        "id": "0", "source_topics": [a.source_topic],
        "state_changelog_topics": [{"name": a.changelog or f"{a.group}-store-changelog"}]}]}

    # Join: epoch 0, full topology, rebalance timeout, empty owned task lists.
    body = heartbeat_request(a.group, member_id, 0, topology=topology, rebalance_timeout_ms=30000,
                             owned={}, process_id=process_id, client_tags=[],
                             task_offsets=[], task_end_offsets=[])
    for _ in range(50):  # retriable coordinator errors: 14 LOAD_IN_PROGRESS, 15 NOT_AVAILABLE, 16 NOT_COORDINATOR
        resp = heartbeat_response(c.call(API_STREAMS_GROUP_HEARTBEAT, a.version, body), a.version)
        print("join ->", json.dumps(resp))
        if resp["error_code"] not in (14, 15, 16):
            break
        time.sleep(0.2)
    if resp["error_code"] != 0:
        sys.exit(f"join failed: error {resp['error_code']}: {resp['error_message']}")
    epoch, owned = resp["member_epoch"], {"active": [], "standby": [], "warmup": []}
    for i in range(a.rounds):
        if resp["active_tasks"] is not None:
            owned = {"active": resp["active_tasks"], "standby": resp["standby_tasks"],
                     "warmup": resp["warmup_tasks"]}
            if owned["active"]:
                break
        time.sleep(min(resp["heartbeat_interval_ms"], 1000) / 1000)
        # Steady state: current epoch, no topology, owned tasks (always allowed; null = unchanged).
        body = heartbeat_request(a.group, member_id, epoch, owned=owned)
        resp = heartbeat_response(c.call(API_STREAMS_GROUP_HEARTBEAT, a.version, body), a.version)
        print(f"heartbeat {i} ->", json.dumps(resp))
        if resp["error_code"] != 0:
            sys.exit(f"heartbeat failed: error {resp['error_code']}: {resp['error_message']}")
        epoch = resp["member_epoch"]
    print("owned:", json.dumps(owned))

    if a.commit is not None and owned["active"]:
        parts = {p: a.commit for t in owned["active"] for p in t["partitions"]}
        print(f"offset commit epoch={epoch} ->", offset_commit(c, a.group, member_id, epoch, a.source_topic, parts))
        print(f"offset commit epoch={epoch + 1} (too new) ->",
              offset_commit(c, a.group, member_id, epoch + 1, a.source_topic, parts))
        print("offset commit unknown member ->",
              offset_commit(c, a.group, str(uuid.uuid4()), epoch, a.source_topic, parts))

    d = describe_response(c.call(API_STREAMS_GROUP_DESCRIBE, a.version,
                                 describe_request([a.group], a.version)), a.version)
    print("describe ->", json.dumps(d))

    if a.leave:
        body = heartbeat_request(a.group, member_id, -1)
        resp = heartbeat_response(c.call(API_STREAMS_GROUP_HEARTBEAT, a.version, body), a.version)
        print("leave ->", json.dumps(resp))
    return 0 if owned["active"] else 1


if __name__ == "__main__":
    sys.exit(main())
