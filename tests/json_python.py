# Differential test of the JSON reader (lib/io/json.c) against Python's json
# module: hand-picked edge cases (accept/reject must agree, accepted values
# must be equal) and randomly generated documents in the shapes real writers
# produce (ensure_ascii or raw UTF-8, astral characters and surrogate pairs,
# C1 controls, U+2028, very long keys, indentation with tabs, newlines before
# ':').  Known, deliberate differences: duplicate keys and lone surrogates,
# which Python accepts and tfm rejects.
import json
import os
import random
import subprocess
import sys
import tempfile

probe = os.path.join(os.environ.get("TFM_BUILDDIR", "."), "tests", "io_probe")
sanitized = bool(os.environ.get("TFM_SANITIZED"))
failures = 0


def no_constants(name):
    raise ValueError("constant " + name)


def python_parse(raw):
    try:
        text = raw.decode("utf-8")
        if text.startswith("\ufeff"):
            text = text[1:]
        return True, json.loads(text, parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError):
        return False, None


def tfm_parse_all(blobs):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, b in enumerate(blobs):
            p = os.path.join(d, "%d.json" % i)
            with open(p, "wb") as f:
                f.write(b)
            paths.append(p)
        r = subprocess.run([probe, "json-dump", *paths], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if r.returncode != 0:
            sys.exit("io_probe failed: " + r.stderr.decode())
        lines = r.stdout.decode("utf-8").split("\n")[:-1]
    if len(lines) != len(blobs):
        sys.exit("io_probe printed %d lines for %d inputs" % (len(lines), len(blobs)))
    out = []
    for line in lines:
        if line.startswith("ERROR "):
            out.append((False, line[6:]))
        else:
            out.append((True, json.loads(line)))
    return out


def compare(blobs, what):
    global failures
    for raw, (ok, val) in zip(blobs, tfm_parse_all(blobs)):
        pok, pval = python_parse(raw)
        if ok != pok or (ok and val != pval):
            failures += 1
            print("FAIL (%s): %r\n  tfm: %s %r\n  python: %s %r" %
                  (what, raw[:200], ok, val if ok else val, pok, pval))
        elif not ok and not val.split(":")[0].endswith(".json"):
            failures += 1
            print("FAIL (%s): message does not name the file: %s" % (what, val))


valid = [
    '[1e1]', '[-0]', '[1E-2]', '[0e+1]', '[-1]', '[1.5e308]', '{"":0}', '[""]',
    '["\\u0000"]', '"\\uFFFF"', '[[]   ]', ' [] ', '["\\u2028"]', '["\u00e9"]',
    '[123456789012345678901234567890]', '{"a":[{"b":{}}]}', '{"a":1}', '{"a":"b"}',
    '{"a":[1]}', '{"a":{"b":null}}', '{"a":true}', '[1,2,3]', '["a",-1]', '[-1,"a"]',
    '{"a" : 1 , "b" : 2}', '[1 ,2]', '{"a":1 }', '[[1],[2]]', '"\\u0061"',
    '[":"]', '{":":":"}', '{"a:b":1}', '["#"]', '["{"]', '["-"]', '{"- a":1}',
    '["? a"]', '["&a"]', '["*a"]', '["!a"]', '["%"]', '["@"]', '["|"]', '[">"]',
    '{"a":-1}', '{"a" :"b"}', '[1,\n2]', '{\n"a"\n:\n1\n}', '{"a":\n1}', '1\n', '"a"\n',
    '  [1]  \n\n', '[1]\r\n', '\t[1]\t', '{\n\t"a": [\n\t\t1\n\t]\n}', '[1,{"a":2}]',
    '[{},{}]', '["\\ud83d\\ude00"]', '["\\uD834\\uDD1E x \\ud83d\\ude00"]',
    '["\\"\\\\\\/\\b\\f\\n\\r\\t"]', '["\x7f\u0085\u009f\u2029\ufeff"]', '\ufeff[1]',
    '["a\\u0000b", "\\u0000"]', '[0.0000001, 1e-7, 1E+400]', '[-0.0]', '{"a": [], "b": {}}',
    '[null, true, false]', '"' + "x" * 5000 + '"', '{"' + "k" * 3000 + '": "' + "v" * 3000 + '"}',
    '["- a", "--- ", "...", "a: b"]', '[ "a" , "b" ]', '{"a\\"b": "c\\\\"}',
    '{"\\u00e9": 1, "\u00e9x": 2}', '["\U0001F600"]', '[1]\n\n\n',
]
invalid = [
    '[1,]', '[,1]', '{"a":1,}', '[1 2]', '{"a" 1}', '{"a":1 "b":2}', '{a:1}',
    '["a\x01"]', "'a'", '[01]', '["\\a"]', '[NaN]', '[Infinity]', '[-Infinity]',
    '[.5]', '[5.]', '[+1]', '[1e]', '[1e+]', '["\\u00"]', '[nul]', '[True]',
    '{"a":1}}', ']', '}', '[', '{', '"', '', ' ', '[[]', '{"a":}', '{:1}',
    '{"a"}', '{,}', '[1,,2]', '{"a":1,,"b":2}', '["a"]x', '[1]#', '/* */[1]',
    '[1]//', '\x00', '[1]\x00', '["\t"]', '["a\nb"]', '[-]', '[--1]', '[0x1]',
    '[1.e1]', '[-.5]', '["\\x41"]', '["\\U0001F600"]', '["\\e"]', '[1] [2]',
    '--- [1]', '[1]\n...', '!!str "a"', '&a [1]', '[*a]', '- 1', 'a: 1',
    '? "a"', '["a" "b"]', '{"a":1 , }', '[1\n,]', '{"a"::1}', '[1:2]', '{"a":1:2}',
    '[tru]', '[truee]', '[nulll]', '[1 ]]', '{"a": [}', '[{]', '["\\uG000"]',
]
compare([s.encode("utf-8") for s in valid], "valid")
compare([s.encode("utf-8") for s in invalid], "invalid")
compare([b'["\xff"]', b'["\xc0\x80"]', b'["\xed\xa0\x80"]', b'["\xf4\x90\x80\x80"]',
         b'["\xe2\x82"]', b'[1]\xff'], "invalid UTF-8")

# Random documents
rng = random.Random(1234)
alphabet = (list("abcxyz019 _-:,#&*!{}[]'\"\\/") + ["\t", "\n", "\r", "\x00", "\x01", "\x1f", "\x7f"] +
            ["\u0085", "\u009f", "\u00a0", "\u00e9", "\u0120", "\u2028", "\u2029", "\ufeff",
             "\ufffd", "\uffff", "\ufffe", "\u4e2d", "\U0001F600", "\U0010FFFF", "\U00010000"])


def rstring():
    n = rng.choice([0, 1, 2, 5, 20, 100, 700, 1500]) if rng.random() < 0.2 else rng.randint(0, 8)
    return "".join(rng.choice(alphabet) for _ in range(n))


def rnumber():
    return rng.choice([0, -0.0, 1, -7, 2**53 + 1, -2**63, 1e-300, 3.25, 1e100, rng.random() * 1e6,
                       -rng.randint(0, 10**12)])


def rvalue(depth):
    r = rng.random()
    if depth > 4 or r < 0.35:
        return rng.choice([None, True, False, rnumber(), rstring(), rstring()])
    if r < 0.65:
        return [rvalue(depth + 1) for _ in range(rng.randint(0, 5))]
    d = {}
    for _ in range(rng.randint(0, 5)):
        d[rstring()] = rvalue(depth + 1)
    return d


def serialize(v):
    mode = rng.randint(0, 3)
    if mode == 0:
        s = json.dumps(v)
    elif mode == 1:
        s = json.dumps(v, ensure_ascii=False)
    elif mode == 2:
        s = json.dumps(v, ensure_ascii=rng.random() < 0.5, indent="\t")
    else:
        # newlines and spaces before ':' and ',' as some writers do
        s = json.dumps(v, ensure_ascii=False, indent=1, separators=(" ,", "\n :  "))
    return s.encode("utf-8", "surrogatepass")


n_docs = 150 if sanitized else 600
docs = [serialize(rvalue(0)) for _ in range(n_docs)]
compare(docs, "random")

if failures:
    sys.exit("%d check(s) failed" % failures)
print("json_python: %d edge cases and %d random documents agree with Python's json" %
      (len(valid) + len(invalid) + 6, n_docs))
