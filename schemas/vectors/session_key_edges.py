"""Hand-written session-key edge cases, with hand-written expectations (DESIGN.md "Canonical
session keys" and Python's str semantics), for schemas/vectors/generate.py.

The generator refuses to write the vectors when the Python canonicaliser disagrees with one of
these: an expectation here is a claim about the contract, not a recording of what the code does.

Each case: (id, tags, raw key, sending agent, expected canonical key, or ERR(repr of the agent
segment) or AgentErr(repr of the sending agent's id) for the ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Err:
    """The key names no agent: ValueError("malformed agent key: <repr> is not an agent id")."""

    segment_repr: str

    @property
    def message(self) -> str:
        return f"malformed agent key: {self.segment_repr} is not an agent id"


@dataclass(frozen=True)
class ScopeErr:
    """An unknown DM scope: ValueError("unknown DM scope <repr>; expected one of …")."""

    scope_repr: str

    @property
    def message(self) -> str:
        return (f"unknown DM scope {self.scope_repr}; expected one of main, per-peer, "
                "per-channel-peer, per-account-channel-peer")


@dataclass(frozen=True)
class AgentErr:
    """The agent id given is none: ValueError("invalid agent_id <repr>: an agent id matches …")."""

    agent_repr: str

    @property
    def message(self) -> str:
        return (f"invalid agent_id {self.agent_repr}: an agent id matches "
                "^[a-z0-9][a-z0-9_-]{0,63}$")


ERR = Err
# Not agent ids (refused, never lowercased or trimmed: the worker dead-letters such a record):
# (name, agent id, its repr)
BAD_AGENT_IDS = [
    ("upper", "OPS", "'OPS'"),
    ("mixed-case", "Ops", "'Ops'"),
    ("empty", "", "''"),
    ("too-long", "a" * 65, repr("a" * 65)),
    ("leading-dash", "-ops", "'-ops'"),
    ("leading-underscore", "_ops", "'_ops'"),
    ("leading-space", " ops", "' ops'"),
    ("trailing-space", "ops ", "'ops '"),
    ("trailing-newline", "ops\n", "'ops\\n'"),
    ("inner-space", "o ps", "'o ps'"),
    ("colon", "a:b", "'a:b'"),
    ("non-ascii", "öps", "'öps'"),
    ("kelvin-sign", "\u212aops", "'\u212aops'"),
]
DM = "agent:ops:telegram:direct:u1"

# Every character Python's str.strip() removes (str.isspace()), by hand: JavaScript's trim()
# keeps the first five (U+001C..U+001F, U+0085) and removes U+FEFF, which Python keeps.
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# Not whitespace for Python (kept, part of the id): BOM, zero-width space, Mongolian vowel
# separator, word joiner, NUL, BEL, ESC, DEL, NBSP-lookalikes that are not spaces.
NOT_WHITESPACE = "\ufeff\u200b\u180e\u2060\x00\x07\x1b\x7f"


def _whitespace_cases() -> list[tuple]:
    out = []
    for ch in PY_WHITESPACE:
        name = f"U+{ord(ch):04X}"
        out.append((f"ws-around-key-{name}", ["whitespace"], f"{ch}Agent:OPS:Telegram:DM:U1{ch}",
                    "ops", DM))
        out.append((f"ws-around-segment-{name}", ["whitespace"],
                    f"agent:{ch}ops{ch}:telegram{ch}:{ch}direct:{ch}U1{ch}", "ops", DM))
    for ch in NOT_WHITESPACE:
        name = f"U+{ord(ch):04X}"
        tags = ["bom"] if ch == "\ufeff" else ["control"] if ord(ch) < 0x20 or ch == "\x7f" else [
            "not-whitespace"]
        out.append((f"kept-in-peer-{name}", tags, f"agent:ops:telegram:direct:{ch}U1{ch}", "ops",
                    f"agent:ops:telegram:direct:{ch}u1{ch}"))
    return out


CANONICAL: list[tuple] = [
    *_whitespace_cases(),
    # BOM: not whitespace for Python, so a key that starts with one is a bare key, and an agent
    # segment that ends with one names no agent
    ("bom-before-agent-prefix", ["bom"], "\ufeffagent:ops:main", "ops",
     "agent:ops:\ufeffagent:ops:main"),
    ("bom-alone", ["bom", "main"], "\ufeff", "ops", "agent:ops:\ufeff"),
    ("bom-in-agent-segment", ["bom", "invalid"], "agent:ops\ufeff:main", "ops",
     ERR("'ops\\ufeff'")),
    ("bom-in-peer-of-signal-group", ["bom", "signal"], "signal:group:\ufeffAbC=", "ops",
     "agent:ops:signal:group:\ufeffAbC="),
    # U+001F and U+0085: whitespace for Python (JavaScript's trim() keeps them)
    ("unit-separator-around-agent", ["whitespace", "control"], "agent:\x1fops\x1f:main", "ops",
     "agent:ops:main"),
    ("unit-separator-alone", ["whitespace", "main"], "\x1f", "ops", "agent:ops:main"),
    ("nel-around-main", ["whitespace", "main"], "\x85main\x85", "ops", "agent:ops:main"),
    ("line-separator-before-agent-id", ["whitespace"], "agent:\u2028x:main", "ops",
     "agent:x:main"),
    # control characters inside an id are kept (they are not whitespace)
    ("nul-inside-peer", ["control"], "agent:ops:slack:direct:U\x001", "ops",
     "agent:ops:slack:direct:u\x001"),
    ("esc-inside-cron", ["control"], "cron:J\x1bOB", "ops", "agent:ops:cron:j\x1bob"),
    ("del-in-agent-segment", ["control", "invalid"], "agent:o\x7fps:main", "ops",
     ERR("'o\\x7fps'")),
    ("nul-in-agent-segment", ["control", "invalid"], "agent:o\x00ps:main", "ops",
     ERR("'o\\x00ps'")),
    # main / empty
    ("empty", ["main"], "", "ops", "agent:ops:main"),
    ("blank", ["main", "whitespace"], "   ", "ops", "agent:ops:main"),
    ("main", ["main"], "main", "ops", "agent:ops:main"),
    ("main-upper-padded", ["main"], " MAIN\n", "ops", "agent:ops:main"),
    ("agent-main", ["main"], "agent:ops:main", "ops", "agent:ops:main"),
    ("agent-main-mixed-case", ["main"], "Agent:OPS:Main", "ops", "agent:ops:main"),
    ("agent-only", ["main"], "agent:ops", "ops", "agent:ops:main"),
    ("agent-trailing-colon", ["main"], "agent:ops:", "ops", "agent:ops:main"),
    ("agent-blank-rest", ["main"], "agent:ops:   ", "ops", "agent:ops:main"),
    ("other-agent-main", ["main", "other-agent"], "agent:other:main", "ops", "agent:other:main"),
    ("main-with-more", ["main"], "main:extra", "ops", "agent:ops:main:extra"),
    ("two-empty-segments", ["main"], ":", "ops", "agent:ops::"),
    ("agent-two-empty-segments", ["main"], "agent:ops::", "ops", "agent:ops::"),
    ("word-agent-alone", ["main"], "agent", "ops", "agent:ops:agent"),
    ("nested-agent-key", ["main"], "agent:ops:agent:other:main", "ops",
     "agent:ops:agent:other:main"),
    # direct messages and the legacy `dm`
    ("per-peer", ["dm-scope"], "agent:ops:direct:U1", "ops", "agent:ops:direct:u1"),
    ("legacy-dm-bare", ["legacy-dm"], "dm:U1", "ops", "agent:ops:direct:u1"),
    ("legacy-dm-upper", ["legacy-dm"], "agent:ops:DM:U1", "ops", "agent:ops:direct:u1"),
    ("legacy-dm-channel", ["legacy-dm"], "agent:ops:slack:dm:U1", "ops",
     "agent:ops:slack:direct:u1"),
    ("legacy-dm-account", ["legacy-dm"], "agent:ops:slack:T0WORK:DM:U1", "ops",
     "agent:ops:slack:t0work:direct:u1"),
    ("legacy-dm-demo", ["legacy-dm", "whitespace"], " Agent:OPS:Telegram:DM:Uabc", "ops",
     "agent:ops:telegram:direct:uabc"),
    ("peer-called-dm", ["legacy-dm"], "agent:ops:direct:dm", "ops", "agent:ops:direct:dm"),
    ("dm-alone", ["legacy-dm"], "dm", "ops", "agent:ops:dm"),
    ("dm-in-cron-stays", ["legacy-dm"], "cron:dm:run:x", "ops", "agent:ops:cron:dm:run:x"),
    ("group-peer-called-dm", ["legacy-dm"], "slack:group:DM", "ops", "agent:ops:slack:group:dm"),
    ("account-scope", ["dm-scope"], "agent:ops:Slack:T0WORK:Direct:U1", "ops",
     "agent:ops:slack:t0work:direct:u1"),
    # groups, channels, threads, Telegram topics
    ("discord-channel", ["group"], "agent:ops:Discord:Channel:123", "ops",
     "agent:ops:discord:channel:123"),
    ("slack-thread", ["thread"], "agent:ops:slack:channel:C1:Thread:1700.1", "ops",
     "agent:ops:slack:channel:c1:thread:1700.1"),
    ("telegram-topic", ["telegram-topic"], "agent:ops:telegram:group:-100123:topic:42", "ops",
     "agent:ops:telegram:group:-100123:topic:42"),
    ("telegram-thread-becomes-topic", ["telegram-topic"],
     "agent:ops:telegram:group:-100123:thread:42", "ops",
     "agent:ops:telegram:group:-100123:topic:42"),
    ("telegram-upper", ["telegram-topic"], "Telegram:Group:-100:TOPIC:7", "ops",
     "agent:ops:telegram:group:-100:topic:7"),
    ("telegram-dm-thread", ["telegram-topic"], "telegram:direct:123:thread:5", "ops",
     "agent:ops:telegram:direct:123:topic:5"),
    ("telegram-account-dm-thread", ["telegram-topic"], "telegram:bot1:direct:123:THREAD:9", "ops",
     "agent:ops:telegram:bot1:direct:123:topic:9"),
    ("per-peer-thread-has-no-channel", ["telegram-topic"], "direct:123:thread:5", "ops",
     "agent:ops:direct:123:thread:5"),
    ("discord-topic-stays-topic", ["thread"], "agent:ops:discord:channel:1:topic:7", "ops",
     "agent:ops:discord:channel:1:topic:7"),
    ("two-topics-two-sessions-a", ["telegram-topic"], "telegram:group:-1:topic:1", "ops",
     "agent:ops:telegram:group:-1:topic:1"),
    ("two-topics-two-sessions-b", ["telegram-topic"], "telegram:group:-1:topic:2", "ops",
     "agent:ops:telegram:group:-1:topic:2"),
    ("marker-right-after-kind", ["thread"], "slack:channel:thread:5", "ops",
     "agent:ops:slack:channel:thread:5"),
    ("marker-at-end", ["thread"], "slack:channel:C1:thread", "ops",
     "agent:ops:slack:channel:c1:thread"),
    ("last-marker-wins", ["thread"], "slack:channel:C1:thread:a:THREAD:b", "ops",
     "agent:ops:slack:channel:c1:thread:a:thread:b"),
    ("thread-id-with-colons", ["thread"], "slack:channel:C1:thread:A:B", "ops",
     "agent:ops:slack:channel:c1:thread:a:b"),
    # case-preserving peers: Signal group ids, Matrix room ids
    ("signal-group", ["signal"], "agent:ops:signal:group:AbC+/dE=", "ops",
     "agent:ops:signal:group:AbC+/dE="),
    ("signal-group-upper-key", ["signal"], "AGENT:OPS:SIGNAL:GROUP:AbC+/dE=", "ops",
     "agent:ops:signal:group:AbC+/dE="),
    ("signal-group-bare", ["signal"], "signal:group:AbC=", "ops", "agent:ops:signal:group:AbC="),
    ("signal-group-non-ascii", ["signal", "case-folding"], "signal:group:ÄbÇΣ", "ops",
     "agent:ops:signal:group:ÄbÇΣ"),
    ("signal-group-thread", ["signal", "thread"], "signal:group:AbC=:Thread:XY", "ops",
     "agent:ops:signal:group:AbC=:thread:xy"),
    ("signal-direct-lowered", ["signal"], "agent:ops:signal:direct:+4915Abc", "ops",
     "agent:ops:signal:direct:+4915abc"),
    ("signal-channel-lowered", ["signal"], "signal:channel:AbC", "ops",
     "agent:ops:signal:channel:abc"),
    ("signal-account-direct-lowered", ["signal"], "signal:Acct:direct:UuId-AB", "ops",
     "agent:ops:signal:acct:direct:uuid-ab"),
    ("matrix-room", ["matrix"], "agent:ops:matrix:group:!AbC:Matrix.org", "ops",
     "agent:ops:matrix:group:!AbC:Matrix.org"),
    ("matrix-room-port", ["matrix"], "agent:ops:Matrix:Channel:!AbC:example.org:8448", "ops",
     "agent:ops:matrix:channel:!AbC:example.org:8448"),
    ("matrix-room-thread", ["matrix", "thread"],
     "AGENT:OPS:MATRIX:GROUP:!AbC:Ex.ORG:THREAD:$EvT", "ops",
     "agent:ops:matrix:group:!AbC:Ex.ORG:thread:$evt"),
    ("matrix-room-last-marker", ["matrix", "thread"], "matrix:group:!R:thread:X:thread:Y", "ops",
     "agent:ops:matrix:group:!R:thread:X:thread:y"),
    ("matrix-dm-room", ["matrix"], "agent:ops:matrix:direct:!DmRoom:m.org", "ops",
     "agent:ops:matrix:direct:!DmRoom:m.org"),
    ("matrix-user-lowered", ["matrix"], "agent:ops:matrix:direct:@Alice:Example.org", "ops",
     "agent:ops:matrix:direct:@alice:example.org"),
    ("matrix-room-padded", ["matrix", "whitespace"], "matrix:group: !AbC :Ex.org", "ops",
     "agent:ops:matrix:group:!AbC:Ex.org"),
    ("matrix-room-account-dm", ["matrix"], "matrix:Acct:DM:!Room:S.org", "ops",
     "agent:ops:matrix:acct:direct:!Room:S.org"),
    ("matrix-room-sigma", ["matrix", "case-folding"], "matrix:group:!ΑΣ:s.org", "ops",
     "agent:ops:matrix:group:!ΑΣ:s.org"),
    # a per-peer DM key names no channel: a room id is known by its `!` (no other channel's
    # peer ids start with one), and keeps its case like a channelled one
    ("matrix-dm-room-per-peer", ["matrix", "dm-scope"], "agent:ops:direct:!DmRoom:m.org", "ops",
     "agent:ops:direct:!DmRoom:m.org"),
    ("matrix-dm-room-per-peer-bare-legacy", ["matrix", "legacy-dm"], "DM:!DmRoom:M.org:8448",
     "ops", "agent:ops:direct:!DmRoom:M.org:8448"),
    ("matrix-dm-room-per-peer-padded", ["matrix", "whitespace"], " Direct : !R0om : S.org ",
     "ops", "agent:ops:direct:!R0om:S.org"),
    ("matrix-dm-room-per-peer-thread", ["matrix", "thread"], "direct:!R:Ex.org:Thread:$EvT",
     "ops", "agent:ops:direct:!R:Ex.org:thread:$evt"),
    ("matrix-dm-room-per-peer-non-ascii", ["matrix", "case-folding"], "direct:!ÄΣ:s.org", "ops",
     "agent:ops:direct:!ÄΣ:s.org"),
    ("matrix-user-per-peer-lowered", ["matrix"], "direct:@Alice:Example.org", "ops",
     "agent:ops:direct:@alice:example.org"),
    ("matrix-dm-room-account-port", ["matrix", "dm-scope"], "matrix:Bot1:direct:!Room:S.org:8448",
     "ops", "agent:ops:matrix:bot1:direct:!Room:S.org:8448"),
    ("bang-peer-of-other-channel-dm-lowered", ["matrix"], "slack:direct:!AbC", "ops",
     "agent:ops:slack:direct:!abc"),
    ("bang-peer-of-group-without-channel", ["matrix"], "group:!AbC:x", "ops",
     "agent:ops:group:!abc:x"),
    ("bang-peer-of-empty-channel-lowered", ["matrix"], "agent:ops::direct:!AbC:x", "ops",
     "agent:ops::direct:!abc:x"),
    # other sources: no peer structure, lowercased
    ("cron", ["source"], "cron:Job-1", "ops", "agent:ops:cron:job-1"),
    ("cron-run", ["source"], "agent:ops:cron:Job-1:run:R-9", "ops", "agent:ops:cron:job-1:run:r-9"),
    ("subagent", ["source"], "subagent:Research:1", "ops", "agent:ops:subagent:research:1"),
    ("hook", ["source"], "hook:0F8FAD5B-D9CB-469F-A165-70867728950E", "ops",
     "agent:ops:hook:0f8fad5b-d9cb-469f-a165-70867728950e"),
    ("acp", ["source"], "ACP:Session:X", "ops", "agent:ops:acp:session:x"),
    ("cron-direct-not-a-dm", ["source"], "cron:direct:X", "ops", "agent:ops:cron:direct:x"),
    # non-ASCII case folding: Python's str.lower() (full mapping, final sigma, Unicode 14)
    ("latin-1-upper", ["case-folding"], "slack:channel:ÄÖÜ", "ops", "agent:ops:slack:channel:äöü"),
    ("dotted-capital-i", ["case-folding"], "slack:direct:İSTANBUL", "ops",
     "agent:ops:slack:direct:i\u0307stanbul"),
    ("dotless-i-stays", ["case-folding"], "slack:direct:ıI", "ops", "agent:ops:slack:direct:ıi"),
    ("sharp-s-stays", ["case-folding"], "slack:direct:STRAßE", "ops",
     "agent:ops:slack:direct:straße"),
    ("capital-sharp-s", ["case-folding"], "slack:direct:\u1e9e", "ops",
     "agent:ops:slack:direct:ß"),
    ("final-sigma-in-peer", ["case-folding", "sigma"], "slack:direct:ΟΔΟΣ", "ops",
     "agent:ops:slack:direct:οδος"),
    ("sigma-alone", ["case-folding", "sigma"], "cron:Σ", "ops", "agent:ops:cron:σ"),
    ("sigma-mid-word", ["case-folding", "sigma"], "cron:ΑΣΑ", "ops", "agent:ops:cron:ασα"),
    # a multi-segment peer is lowered whole: the colon is case-ignorable, so a sigma before it
    # is not final; other segments are lowered one by one, so there it is
    ("sigma-before-colon-in-peer", ["case-folding", "sigma"], "slack:channel:ΑΣ:Β", "ops",
     "agent:ops:slack:channel:ασ:β"),
    ("sigma-before-colon-in-segments", ["case-folding", "sigma"], "cron:ΑΣ:Β", "ops",
     "agent:ops:cron:ας:β"),
    ("sigma-after-apostrophe", ["case-folding", "sigma"], "cron:Α'Σ", "ops", "agent:ops:cron:α'ς"),
    ("titlecase-dz", ["case-folding"], "cron:\u01c4\u01c5\u01c6", "ops",
     "agent:ops:cron:\u01c6\u01c6\u01c6"),
    ("cherokee", ["case-folding"], "cron:\u13a0\u13f5", "ops", "agent:ops:cron:\uab70\u13fd"),
    ("georgian-mtavruli", ["case-folding"], "cron:\u1c90", "ops", "agent:ops:cron:\u10d0"),
    ("deseret-non-bmp", ["case-folding"], "cron:\U00010400", "ops", "agent:ops:cron:\U00010428"),
    ("kelvin-sign-in-agent-id", ["case-folding"], "agent:\u212aATE:main", "ops", "agent:kate:main"),
    ("angstrom-sign", ["case-folding"], "cron:\u212b", "ops", "agent:ops:cron:å"),
    ("fullwidth-agent-is-not-agent", ["case-folding"], "ＡＧＥＮＴ:ops:main", "ops",
     "agent:ops:ａｇｅｎｔ:ops:main"),
    ("roman-numeral", ["case-folding"], "cron:\u216b", "ops", "agent:ops:cron:\u217b"),
    ("circled-letter", ["case-folding"], "cron:\u24b6", "ops", "agent:ops:cron:\u24d0"),
    # characters Node's ICU (Unicode 17) lowercases and Python 3.11 (Unicode 14) does not
    ("unicode16-cyrillic-tje", ["case-folding", "unicode-version"], "cron:\u1c89", "ops",
     "agent:ops:cron:\u1c89"),
    ("unicode16-latin-rams-horn", ["case-folding", "unicode-version"], "cron:\ua7cb\ua7dc", "ops",
     "agent:ops:cron:\ua7cb\ua7dc"),
    ("unicode16-garay", ["case-folding", "unicode-version"], "cron:\U00010d50\U00010d65", "ops",
     "agent:ops:cron:\U00010d50\U00010d65"),
    ("unicode17-non-bmp", ["case-folding", "unicode-version"], "cron:\U00016ea0", "ops",
     "agent:ops:cron:\U00016ea0"),
    # final sigma beside characters whose Cased/Case_Ignorable changed after Unicode 14
    ("sigma-then-pharyngeal", ["case-folding", "sigma", "unicode-version"], "cron:ΑΣ\u0295", "ops",
     "agent:ops:cron:ασ\u0295"),
    ("pharyngeal-then-sigma", ["case-folding", "sigma", "unicode-version"], "cron:\u0295Σ", "ops",
     "agent:ops:cron:\u0295ς"),
    ("sigma-after-cased-ahom", ["case-folding", "sigma", "unicode-version"],
     "cron:Α\U0001171eΣ", "ops", "agent:ops:cron:α\U0001171eς"),
    # lone surrogates (JSON can carry them; the worker's parser refuses them in records)
    ("lone-surrogate-in-peer", ["surrogate"], "slack:direct:\ud800X", "ops",
     "agent:ops:slack:direct:\ud800x"),
    # keys that name no agent (Rule 1: the worker dead-letters them)
    ("empty-agent", ["invalid"], "agent::main", "ops", ERR("''")),
    ("agent-with-spaces", ["invalid"], "agent:Not An Id:main", "ops", ERR("'Not An Id'")),
    ("agent-starts-with-dash", ["invalid"], "agent:-x:main", "ops", ERR("'-x'")),
    ("agent-starts-with-underscore", ["invalid"], "agent:_x:main", "ops", ERR("'_x'")),
    ("blank-agent", ["invalid", "whitespace"], " agent: :x", "ops", ERR("''")),
    ("agent-colon", ["invalid"], "AGENT:", "ops", ERR("''")),
    ("agent-65-chars", ["invalid"], "agent:" + "a" * 65 + ":main", "ops", ERR(repr("a" * 65))),
    ("dotted-i-agent", ["invalid", "case-folding"], "agent:İ:main", "ops", ERR("'İ'")),
    ("accented-agent", ["invalid", "case-folding"], "agent:é:main", "ops", ERR("'é'")),
    ("quote-in-agent", ["invalid"], "agent:'q:main", "ops", ERR("\"'q\"")),
    ("both-quotes-in-agent", ["invalid"], "agent:a\"b'c:main", "ops", ERR("'a\"b\\'c'")),
    ("tab-inside-agent", ["invalid", "control"], "agent:a\tb:main", "ops", ERR("'a\\tb'")),
    ("backslash-in-agent", ["invalid"], "agent:a\\b:main", "ops", ERR("'a\\\\b'")),
    ("zero-width-space-in-agent", ["invalid", "not-whitespace"], "agent:\u200bops:main", "ops",
     ERR("'\\u200bops'")),
    ("non-bmp-unassigned-in-agent", ["invalid"], "agent:\U000e0080:main", "ops",
     ERR("'\\U000e0080'")),
    ("lone-surrogate-in-agent", ["invalid", "surrogate"], "agent:\udc00:main", "ops",
     ERR("'\\udc00'")),
    ("agent-64-chars-valid", ["main"], "agent:" + "a" * 64 + ":main", "ops",
     "agent:" + "a" * 64 + ":main"),
    ("agent-digit-valid", ["main"], "agent:0:main", "ops", "agent:0:main"),
    ("agent-upper-lowered", ["main"], "agent:OPS-1_x:cron:A", "ops", "agent:ops-1_x:cron:a"),
    # the sending agent's id is checked, whether the key is bare or names its agent itself
    *[(f"agent-arg-{name}", ["invalid", "agent-id"], "main", agent, AgentErr(shown))
      for name, agent, shown in BAD_AGENT_IDS],
    ("agent-arg-checked-for-full-key", ["invalid", "agent-id"], "agent:ops:main", "OPS",
     AgentErr("'OPS'")),
    ("agent-arg-checked-before-key", ["invalid", "agent-id"], "agent:BAD!:main", "Ops",
     AgentErr("'Ops'")),
    ("agent-arg-64-chars", ["agent-id"], "cron:X", "a" * 64, f"agent:{'a' * 64}:cron:x"),
    ("agent-arg-digit-dash-underscore", ["agent-id"], "main", "0a-_", "agent:0a-_:main"),
]


# (id, tags, agent, route fields, DM scope, expected key or ScopeErr/AgentErr)
def _r(channel, kind, peer, account=None, thread=None) -> dict:
    route = {"channel": channel, "peer_kind": kind, "peer_id": peer}
    if account is not None:
        route["account_id"] = account
    if thread is not None:
        route["thread_id"] = thread
    return route


# the key a Matrix DM room gets, before its room id, in each DM scope but main
MATRIX_DM = {"per-peer": "direct:", "per-channel-peer": "matrix:direct:",
             "per-account-channel-peer": "matrix:bot1:direct:"}

ROUTES: list[tuple] = [
    ("tg-dm-main", ["dm-scope"], "ops", _r("telegram", "direct", "12345", "bot1"), "main",
     "agent:ops:main"),
    ("tg-dm-per-peer", ["dm-scope"], "ops", _r("telegram", "direct", "12345", "bot1"), "per-peer",
     "agent:ops:direct:12345"),
    ("tg-dm-per-channel-peer", ["dm-scope"], "ops", _r("telegram", "direct", "12345", "bot1"),
     "per-channel-peer", "agent:ops:telegram:direct:12345"),
    ("tg-dm-per-account", ["dm-scope"], "ops", _r("telegram", "direct", "12345", "bot1"),
     "per-account-channel-peer", "agent:ops:telegram:bot1:direct:12345"),
    ("slack-dm-no-account", ["dm-scope"], "ops", _r("Slack", "direct", "U07AB"),
     "per-account-channel-peer", "agent:ops:slack:default:direct:u07ab"),
    ("slack-dm-empty-account", ["dm-scope"], "ops", _r("slack", "direct", "U1", ""),
     "per-account-channel-peer", "agent:ops:slack:default:direct:u1"),
    ("slack-dm-blank-account", ["dm-scope", "whitespace"], "ops",
     _r("slack", "direct", "U1", "\x1f "),
     "per-account-channel-peer", "agent:ops:slack:default:direct:u1"),
    ("slack-dm-bom-account", ["dm-scope", "bom"], "ops", _r("slack", "direct", "U1", "\ufeff"),
     "per-account-channel-peer", "agent:ops:slack:\ufeff:direct:u1"),
    ("slack-dm-upper-account", ["dm-scope"], "ops", _r("slack", "direct", "U1", " T0WORK "),
     "per-account-channel-peer", "agent:ops:slack:t0work:direct:u1"),
    ("tg-group-any-scope", ["group"], "ops", _r("telegram", "group", "-100123", "bot1"),
     "per-account-channel-peer", "agent:ops:telegram:group:-100123"),
    ("slack-channel", ["group"], "ops", _r("slack", "channel", "C0GENERAL", "T0WORK"), "per-peer",
     "agent:ops:slack:channel:c0general"),
    ("route-slack-thread", ["thread"], "ops",
     _r("slack", "channel", "C0", thread="1700000000.000100"),
     "main", "agent:ops:slack:channel:c0:thread:1700000000.000100"),
    ("tg-topic", ["telegram-topic"], "ops", _r("telegram", "group", "-100123", thread="42"), "main",
     "agent:ops:telegram:group:-100123:topic:42"),
    ("tg-upper-channel-topic", ["telegram-topic"], "ops",
     _r(" Telegram ", "group", "-100123", thread=" 42 "), "main",
     "agent:ops:telegram:group:-100123:topic:42"),
    ("tg-dm-thread-main-scope", ["telegram-topic", "main"], "ops",
     _r("telegram", "direct", "1", thread="9"), "main", "agent:ops:main:topic:9"),
    ("tg-dm-thread-per-peer", ["telegram-topic"], "ops", _r("telegram", "direct", "1", thread="9"),
     "per-peer", "agent:ops:direct:1:topic:9"),
    ("blank-thread-is-none", ["thread", "whitespace"], "ops",
     _r("slack", "channel", "C1", thread=" \x85 "), "main", "agent:ops:slack:channel:c1"),
    ("empty-thread-is-none", ["thread"], "ops", _r("slack", "channel", "C1", thread=""), "main",
     "agent:ops:slack:channel:c1"),
    ("thread-with-colon", ["thread"], "ops", _r("discord", "channel", "1", thread="A:B"), "main",
     "agent:ops:discord:channel:1:thread:a:b"),
    ("route-signal-group", ["signal"], "ops", _r("signal", "group", "AbC+/dE="), "main",
     "agent:ops:signal:group:AbC+/dE="),
    ("signal-dm", ["signal"], "ops", _r("Signal", "direct", "+49Ab"), "per-channel-peer",
     "agent:ops:signal:direct:+49ab"),
    ("route-matrix-room", ["matrix"], "ops", _r("matrix", "group", "!AbC:matrix.org"), "main",
     "agent:ops:matrix:group:!AbC:matrix.org"),
    ("matrix-room-port-thread", ["matrix", "thread"], "ops",
     _r("matrix", "channel", "!AbC:matrix.org:8448", thread="$Ev"), "main",
     "agent:ops:matrix:channel:!AbC:matrix.org:8448:thread:$ev"),
    ("matrix-user", ["matrix"], "ops", _r("matrix", "direct", "@Alice:matrix.org"),
     "per-channel-peer", "agent:ops:matrix:direct:@alice:matrix.org"),
    ("route-matrix-dm-room", ["matrix"], "ops", _r("matrix", "direct", "!DmRoom:matrix.org"),
     "per-channel-peer", "agent:ops:matrix:direct:!DmRoom:matrix.org"),
    # a Matrix room id keeps its case in every DM scope, direct or group, with ports and threads
    *[(f"matrix-{kind}-room-{scope}", ["matrix", "dm-scope"], "ops",
       _r(" Matrix ", kind, " !DmRoom:Matrix.org:8448 ", "Bot1"), scope,
       "agent:ops:main" if kind == "direct" and scope == "main"
       else f"agent:ops:{MATRIX_DM[scope] if kind == 'direct' else 'matrix:' + kind + ':'}"
            "!DmRoom:Matrix.org:8448")
      for kind in ("direct", "group", "channel")
      for scope in ("main", "per-peer", "per-channel-peer", "per-account-channel-peer")],
    *[(f"matrix-direct-room-thread-{scope}", ["matrix", "thread"], "ops",
       _r("matrix", "direct", "!R:S.org", "Bot1", thread="$Ev"), scope,
       f"agent:ops:{MATRIX_DM[scope]}!R:S.org:thread:$ev")
      for scope in ("per-peer", "per-channel-peer", "per-account-channel-peer")],
    ("matrix-user-per-peer", ["matrix"], "ops", _r("matrix", "direct", "@Alice:M.org"), "per-peer",
     "agent:ops:direct:@alice:m.org"),
    ("whatsapp-padded", ["whitespace"], "ops", _r(" WhatsApp ", "group", " 1203@g.us "), "main",
     "agent:ops:whatsapp:group:1203@g.us"),
    ("peer-unit-separator", ["whitespace", "control"], "ops", _r("slack", "direct", "\x1fU1\x1f"),
     "per-peer", "agent:ops:direct:u1"),
    ("peer-bom-kept", ["bom"], "ops", _r("slack", "direct", "\ufeffU1"), "per-peer",
     "agent:ops:direct:\ufeffu1"),
    ("peer-non-ascii", ["case-folding"], "ops", _r("slack", "direct", "ÖΣ"), "per-peer",
     "agent:ops:direct:öς"),
    ("legacy-dm-peer-kind", ["legacy-dm", "outside-schema"], "ops", _r("slack", "dm", "U1"), "main",
     "agent:ops:slack:direct:u1"),
    ("agent-with-dash", ["dm-scope"], "ops-x", _r("slack", "direct", "U1"), "per-peer",
     "agent:ops-x:direct:u1"),
    *[(f"route-agent-arg-{name}", ["invalid", "agent-id"], agent, _r("slack", "direct", "U1"),
       "per-peer", AgentErr(shown)) for name, agent, shown in BAD_AGENT_IDS],
    ("route-agent-arg-group", ["invalid", "agent-id"], "OPS", _r("slack", "group", "G"), "main",
     AgentErr("'OPS'")),
    ("route-scope-checked-before-agent", ["invalid", "dm-scope"], "OPS", _r("slack", "direct", "U"),
     "per-sender", ScopeErr("'per-sender'")),
    ("unknown-scope", ["invalid", "dm-scope"], "ops", _r("slack", "direct", "U1"), "per-sender",
     ScopeErr("'per-sender'")),
    ("scope-is-case-sensitive", ["invalid", "dm-scope"], "ops", _r("slack", "direct", "U1"), "MAIN",
     ScopeErr("'MAIN'")),
    ("scope-is-not-trimmed", ["invalid", "dm-scope"], "ops", _r("slack", "group", "G"), " main",
     ScopeErr("' main'")),
    ("empty-scope", ["invalid", "dm-scope"], "ops", _r("slack", "group", "G"), "",
     ScopeErr("''")),
]

# Timestamps: (text, verdict of the TypeScript builder when it is stricter than Python).
# Python's verdict is recorded by the generator (transcript_connector.parse on a session-reset/1
# record).
TIMESTAMPS: list[tuple[str, str | None]] = [
    ("2026-05-01T12:00:00Z", None),
    ("2026-05-01T12:00:00+00:00", None),
    ("2026-05-01T12:00:00-00:00", None),
    ("2026-05-01t12:00:00z", None),
    ("2026-05-01 12:00:00Z", None),
    ("2026-05-01T12:00:00.123456789Z", None),
    ("2026-05-01T12:00:00.1234567890123456789012Z", None),
    ("2026-05-01T12:00:00+23:59", None),
    ("2026-05-01T12:00:00-23:59", None),
    ("2024-02-29T12:00:00Z", None),
    ("2000-02-29T00:00:00Z", None),
    ("1970-01-01T00:00:00Z", None),
    ("1970-01-01T01:00:00+01:00", None),
    ("1969-12-31T23:30:00-01:00", None),
    ("2999-12-31T23:59:59Z", None),
    ("2999-12-31T23:59:59.000000Z", None),
    ("2999-12-31T23:59:59.0000009Z", None),  # pydantic truncates to microseconds
    ("3000-01-01T00:59:59+01:00", None),
    ("1970-01-01T00:00:00.000000001-00:01", None),
    # invalid for both
    ("1969-12-31T23:59:59Z", None),
    ("1969-12-31T23:59:59.9999999Z", None),
    ("1970-01-01T00:59:59+01:00", None),
    ("2999-12-31T23:59:59.5Z", None),
    ("3000-01-01T00:00:00Z", None),
    ("0099-01-01T00:00:00Z", None),
    ("0000-01-01T00:00:00Z", None),
    ("9999-12-31T23:59:59Z", None),
    ("2026-02-29T12:00:00Z", None),
    ("1900-02-29T12:00:00Z", None),
    ("2026-04-31T12:00:00Z", None),
    ("2026-13-01T12:00:00Z", None),
    ("2026-00-01T12:00:00Z", None),
    ("2026-05-00T12:00:00Z", None),
    ("2026-05-01T24:00:00Z", None),
    ("2026-05-01T12:60:00Z", None),
    ("2026-05-01T12:00:60Z", None),
    ("2026-05-01T12:00:00+24:00", None),
    ("2026-05-01T12:00:00+23:60", None),
    ("2026-05-01T12:00:00+01", None),
    ("2026-05-01T12:00:00", None),
    ("2026-05-01", None),
    ("20260501T120000Z", None),
    ("2026-05-01T12:00:00.Z", None),
    ("+2026-05-01T12:00:00Z", None),
    ("2026-5-1T12:00:00Z", None),
    ("2026-05-01T12:00:00 Z", None),
    (" 2026-05-01T12:00:00Z", None),
    ("2026-05-01T12:00:00Z ", None),
    ("", None),
    ("now", None),
    # not RFC 3339: Python accepted them until its edge checked the spelling
    # (transcript_connector.records._rfc3339); the builder never did
    ("2026-05-01T12:00Z", None),
    ("2026-05-01T12:00:00,5Z", None),
    ("2026-05-01T12:00:00+0100", None),
    ("2026-05-01_12:00:00Z", None),
    ("1700000000", None),
]
