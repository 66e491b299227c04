"""ZooKeeper's transaction logs, as the checker needs them: every `active` node's life.

The servers' logs (`dataDir/version-2/log.<zxid>`) hold every committed change with the
leader's wall-clock time, so they show nodes the watch-based observers never read (a node that
lived less than a read's round trip). The format is ZooKeeper's (3.5 to 3.9, Jute, big-endian):

    file:   FileHeader {int magic "ZKLG"; int version 2; long dbid}, then entries
    entry:  long crc (Adler-32 of the bytes); buffer bytes (int length + bytes); byte 'B'
    bytes:  TxnHeader {long clientId; int cxid; long zxid; long time; int type}, the record of
            `type`, then (3.6+, when digests are on) a TxnDigest the reader ignores
    CreateTxn {ustring path; buffer data; vector<ACL> acl; boolean ephemeral; int parentCVersion}
    DeleteTxn {ustring path}   MultiTxn {vector<Txn {int type; buffer data}>}
    CloseSessionTxn {vector<ustring> paths2Delete}   (may be empty: the session's ephemerals go)

The server preallocates the file with zeros: an entry of length 0 ends it. An entry cut short
(a server killed in the middle of a write, or read while it writes) ends the file too and is
reported; a CRC mismatch is bad data.
"""
import json
import os
import struct
import zlib
from collections import namedtuple

MAGIC = 0x5A4B4C47  # "ZKLG"

CREATE, DELETE, MULTI, CREATE2, CREATE_CONTAINER, CREATE_TTL = 1, 2, 14, 15, 19, 21
CLOSE_SESSION, ERROR = -11, -1

# One change the checker uses: a node created (data, ephemeral owner) or deleted, or a session
# closed (its ephemerals deleted).
Change = namedtuple("Change", "zxid time kind path data owner")


class _Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise EOFError
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def buffer(self):
        n = self.i32()
        return b"" if n < 0 else self.take(n)

    def string(self):
        return self.buffer().decode("utf-8", "replace")

    def boolean(self):
        return self.take(1) != b"\0"


def _create(r, kind, zxid, time, session):
    path, data = r.string(), r.buffer()
    ephemeral = False
    if kind in (CREATE, CREATE2):
        for _ in range(max(0, r.i32())):  # ACLs: perms, scheme, id
            r.i32(), r.string(), r.string()
        ephemeral = r.boolean()
    return Change(zxid, time, "create", path, data, session if ephemeral else 0)


def _changes(kind, record, zxid, time, session):
    r = _Reader(record)
    if kind in (CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL):
        return [_create(r, kind, zxid, time, session)]
    if kind == DELETE:
        return [Change(zxid, time, "delete", r.string(), b"", 0)]
    if kind == CLOSE_SESSION:
        return [Change(zxid, time, "close", "", b"", session)]
    if kind == MULTI:
        out = []
        for _ in range(max(0, r.i32())):
            sub_kind, sub_record = r.i32(), r.buffer()
            if sub_kind == ERROR:  # a failed multi is logged as errors only: nothing changed
                return []
            out += _changes(sub_kind, sub_record, zxid, time, session)
        return out
    return []


def read_log(path):
    """The changes in one log file, and a note when it ends in an entry cut short."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    try:
        magic, version, _ = r.i32(), r.i32(), r.i64()
    except EOFError:
        return [], "%s: shorter than its header" % path
    if magic != MAGIC:
        raise ValueError("%s: not a ZooKeeper transaction log (magic %#x)" % (path, magic))
    if version != 2:
        raise ValueError("%s: transaction log version %d, expected 2" % (path, version))
    changes = []
    while r.pos < len(data):
        start = r.pos
        try:
            crc, length = r.i64(), r.i32()
            if length == 0:
                break
            body = r.take(length)
            if r.take(1) != b"B":
                raise ValueError("%s: entry at byte %d does not end in 'B'" % (path, start))
        except EOFError:
            return changes, "%s: the entry at byte %d is cut short" % (path, start)
        if zlib.adler32(body) & 0xFFFFFFFF != crc & 0xFFFFFFFF:
            raise ValueError("%s: entry at byte %d fails its checksum" % (path, start))
        h = _Reader(body)
        session, _, zxid, time, kind = h.i64(), h.i32(), h.i64(), h.i64(), h.i32()
        try:
            changes += _changes(kind, body[h.pos:], zxid, time, session)
        except EOFError:
            raise ValueError("%s: entry at byte %d (zxid %#x, type %d) is shorter than its "
                             "record" % (path, start, zxid, kind))
    return changes, None


def read_logs(directory):
    """Every change in the logs under `directory` (one folder per server, as the chaos runner
    copies them), each once, in zxid order; and notes. A change is in every server's log that
    was up when it was committed: the union covers servers that were down for a while."""
    by_zxid, notes, servers = {}, [], 0
    for server in sorted(os.listdir(directory)):
        folder = os.path.join(directory, server)
        if not os.path.isdir(folder):
            continue
        servers += 1
        for name in sorted(n for n in os.listdir(folder) if n.startswith("log.")):
            changes, note = read_log(os.path.join(folder, name))
            if note:
                notes.append(note)
            of_this_log = {}
            for c in changes:  # a multi is several changes with one zxid
                of_this_log.setdefault(c.zxid, []).append(c)
            for zxid, cs in of_this_log.items():
                by_zxid.setdefault(zxid, cs)
    if servers == 0:
        raise ValueError("no server's transaction logs under %s" % directory)
    return [c for zxid in sorted(by_zxid) for c in by_zxid[zxid]], notes


def active_nodes(changes, root):
    """Per account, every `{root}/{account}/active` node's life, from the changes in zxid order:
    {"czxid", "seq", "instance", "session", "created" and "gone" (ZooKeeper's ms; gone None while
    it exists)}. The data is the election's ActiveInfo JSON; a node whose data does not parse has
    seq -1."""
    prefix, suffix = root.rstrip("/") + "/", "/active"
    live, ephemerals, nodes = {}, {}, {}

    def account_of(path):
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return None
        account = path[len(prefix):-len(suffix)]
        return account if account and "/" not in account else None

    def end(path, time):
        node = live.pop(path, None)
        if node is not None:
            node["gone"] = time

    for c in changes:
        if c.kind == "create":
            if c.owner:
                ephemerals.setdefault(c.owner, set()).add(c.path)
            account = account_of(c.path)
            if account is None:
                continue
            try:
                info = json.loads(c.data)
                seq, instance, session = info["seq"], info["instanceId"], info["sessionId"]
            except (ValueError, KeyError, TypeError):
                seq, instance, session = -1, "", 0
            node = {"czxid": c.zxid, "seq": seq, "instance": instance, "session": session,
                    "created": c.time, "gone": None}
            live[c.path] = node
            nodes.setdefault(account, []).append(node)
        elif c.kind == "delete":
            end(c.path, c.time)
            for paths in ephemerals.values():
                paths.discard(c.path)
        elif c.kind == "close":
            for path in ephemerals.pop(c.owner, set()):
                end(path, c.time)
    return nodes
