#!/usr/bin/env python3
"""Every program a tracked script calls is installed by a step: a package
scripts/deps names (or one those pull in), Debian's essential or required
set (what a minimal debootstrap has), a program this project builds, or one
the script itself installs or checks for with `command -v` first.

A fresh minimal machine lacked column(1) and man(1) although this machine
had both; this test reads the shell scripts and makefile recipes, takes the
words in command position and finds the package each comes from in dpkg's
database, so a program that only a hand-made machine has fails here."""
import fnmatch
import glob
import os
import re
import shlex
import subprocess
import sys

top = os.environ.get("TFM_SRCDIR") or os.path.join(os.path.dirname(__file__), "..")
os.chdir(top)

if not os.path.exists("/var/lib/dpkg/status"):
    print("SKIP: no dpkg database (not a Debian system)")
    sys.exit(77)

# ---- which files: tracked shell scripts and makefiles
def tracked():
    try:
        out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
        return out.split()
    except (OSError, subprocess.CalledProcessError):
        pass
    # no git (a fresh machine may lack it): the tree less what .gitignore
    # names, which is what configure and the builds made
    ignored = []
    if os.path.exists(".gitignore"):
        with open(".gitignore") as f:
            ignored = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    def is_ignored(rel):
        parts = rel.split("/")
        for pat in ignored:
            anchored, pat = pat.startswith("/"), pat.strip("/")
            if anchored:
                if fnmatch.fnmatch(parts[0], pat):
                    return True
            elif any(fnmatch.fnmatch(p, pat) for p in parts):
                return True
        return parts[0] == ".git"
    return [p for p in glob.glob("**/*", recursive=True)
            if os.path.isfile(p) and not is_ignored(p)]

def kind(path):
    if path.endswith((".mk",)) or os.path.basename(path) == "Makefile":
        return "make"
    if path.endswith(".sh"):
        return "sh"
    if path.endswith(".am"):
        return "make"
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return None
    if re.match(rb"#!\s*(/usr)?/bin/(env\s+)?(ba|da)?sh\b", first):
        return "sh"
    return None

# ---- the shell text of a file: heredoc bodies removed, continuations joined
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")

def shell_lines(text):
    lines, out, end = text.split("\n"), [], None
    for line in lines:
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment's apostrophes are not quotes
        m = HEREDOC.search(line)
        if m:
            end = m.group(2)
            line = line[:m.start()]
        out.append(line)
    return "\n".join(out).replace("\\\n", " ")

def make_recipes(text):
    """The recipe lines of a makefile, as shell text (make's $(VAR) become
    a placeholder, $$ becomes $)."""
    out = []
    text = text.replace("\\\n", " ")
    for line in text.split("\n"):
        if not line.startswith("\t"):
            continue
        line = line.lstrip("\t").lstrip("@-+ ")
        prev = None
        while prev != line:  # innermost first: $(call f,$(x))
            prev, line = line, re.sub(r"(?<!\$)\$\([^()$]*\)|(?<!\$)\$\{[^{}$]*\}|(?<!\$)\$[@<^*?]",
                                      "MAKEVAR", line)
        out.append(line.replace("$$", "$"))
    return "\n".join(out)

KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in",
            "case", "esac", "function", "select", "!", "{", "}", "[[", "]]", "time"}
# words after which the next word is a command again
PREFIXES = {"then", "else", "elif", "do", "if", "while", "until", "!", "{", "time", "exec",
            "command", "env", "nice", "xargs", "timeout", "nohup", "sudo", "$SUDO", "stdbuf"}
BUILTINS = set("""alias bg bind break builtin caller cd command compgen complete continue declare
dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill
let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt
source suspend test times trap true type typeset ulimit umask unalias unset wait . : [""".split())
OPERATORS = {";", "&", "|", "&&", "||", "(", ")", ";;", "|&", "((", "))"}

def lex(text):
    """shlex words with newlines kept as separators; None if it cannot parse."""
    lx = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>\n")
    lx.whitespace = " \t\r"
    lx.whitespace_split = True
    lx.commenters = "#"
    try:
        return list(lx)
    except ValueError:
        return None

def substitutions(text, found):
    """$(...) and `...` replaced by a word, their commands added to found;
    $((...)) arithmetic replaced by a word."""
    out, i, n, double = [], 0, len(text), False
    while i < n:
        if text[i] == '"':
            double = not double
            out.append('"')
            i += 1
        elif text[i] == "#" and not double and (i == 0 or text[i - 1] in " \t\n;"):
            j = text.find("\n", i)
            i = n if j < 0 else j  # a comment: its apostrophes are not quotes
        elif text[i] == "'" and not double:  # literal: awk and perl programs
            j = text.find("'", i + 1)
            j = n - 1 if j < 0 else j
            out.append(text[i:j + 1])
            i = j + 1
        elif text[i] == "\\":
            out.append(text[i:i + 2])
            i += 2
        elif text.startswith("$(", i):
            arith = text.startswith("$((", i)
            depth, j, quote = 0, i + 1, None
            while j < n:
                c = text[j]
                if quote:
                    quote = None if c == quote else quote
                elif c in "'\"":
                    quote = c
                else:
                    depth += {"(": 1, ")": -1}.get(c, 0)
                    if depth == 0:
                        break
                j += 1
            if not arith:
                found += commands(text[i + 2:j])
            out.append("ARITH" if arith else "SUBST")
            i = j + 1
        elif text[i] == "`":
            j = text.find("`", i + 1)
            j = n if j < 0 else j
            found += commands(text[i + 1:j])
            out.append("SUBST")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)

def commands(text):
    """Words in command position, with command substitutions searched too."""
    found = []
    text = substitutions(text, found)
    words = lex(text)
    if words is None:  # one line's odd quoting must not hide the rest
        words = []
        for line in text.split("\n"):
            words += (lex(line) or []) + ["\n"]
    expect, redirect, pattern, skip_var, case_open = True, False, False, False, False
    for w in words:
        if redirect:
            redirect = False
            continue
        punct = bool(w) and set(w) <= set(";&|()\n")
        if pattern:  # a case pattern: words up to ")"
            if w == "esac":
                pattern = False
            elif punct and ")" in w:
                pattern, expect = False, True
            continue
        if punct:
            if ";;" in w:
                pattern = True
            expect = True
            continue
        if set(w) <= set("<>&0123456789") and ("<" in w or ">" in w):
            redirect = True
            continue
        if skip_var:  # the word after for/select, then "in" and its list
            skip_var = w not in ("in",) and False
            continue
        if not expect:
            if w == "in" and case_open:
                case_open, pattern = False, True
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w) or w in PREFIXES:
            continue  # an assignment or a prefix before the command
        if w.startswith("-"):
            if found and found[-1] in PREFIXES:
                continue
            expect = False
            continue
        if w in ("for", "select"):
            skip_var, expect = True, False
            continue
        if w == "case":
            case_open, expect = True, False
            continue
        found.append(w)
        expect = w in KEYWORDS
    return found

# ---- what is installed, and by which package
def dpkg_status():
    pkgs, cur = {}, {}
    with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as f:
        for line in f.read().split("\n") + [""]:
            if not line:
                if cur.get("Package") and "installed" in cur.get("Status", "").split():
                    pkgs[cur["Package"]] = cur
                cur = {}
            elif line[0] not in " \t" and ":" in line:
                k, v = line.split(":", 1)
                cur[k] = v.strip()
    return pkgs

def dep_names(field):
    names = []
    for alt in field.split(","):
        for a in alt.split("|"):
            a = a.strip().split(" ")[0].split(":")[0]
            if a:
                names.append(a)
    return names

pkgs = dpkg_status()
provides = {}
for name, p in pkgs.items():
    for v in dep_names(p.get("Provides", "")):
        provides.setdefault(v, []).append(name)

def closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        n = todo.pop()
        for real in ([n] if n in pkgs else []) + provides.get(n, []):
            if real in seen:
                continue
            seen.add(real)
            p = pkgs[real]
            todo += dep_names(p.get("Depends", "")) + dep_names(p.get("Pre-Depends", ""))
    return seen

deps_list = subprocess.run(["sh", "scripts/deps", "test", "--list"], capture_output=True,
                           text=True, check=True).stdout.split()
base = [n for n, p in pkgs.items()
        if p.get("Essential") == "yes" or p.get("Priority") == "required"]
allowed = closure(deps_list + base)

owner = {}
for lst in glob.glob("/var/lib/dpkg/info/*.list"):
    pkg = os.path.basename(lst)[:-5].split(":")[0]
    with open(lst, encoding="utf-8", errors="replace") as f:
        for path in f.read().split("\n"):
            if re.match(r"^/(usr/)?s?bin/[^/]+$", path):
                owner.setdefault(path, pkg)

def package_of(word):
    for d in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        path = os.path.join(d, word)
        if not os.path.lexists(path):
            continue
        if path in owner:
            return owner[path]
        real = os.path.realpath(path)  # an alternative (awk -> mawk) or a /bin symlink
        for cand in (real, real.replace("/usr/bin/", "/bin/"), real.replace("/bin/", "/usr/bin/")):
            if cand in owner:
                return owner[cand]
    return None

# ---- programs of the project itself
built = set()
for am in glob.glob("**/*.am", recursive=True) + ["Makefile.am"]:
    with open(am) as f:
        for m in re.finditer(r"^\s*\w*PROGRAMS\s*\+?=\s*(.*)$", f.read(), re.M):
            built.update(os.path.basename(p) for p in m.group(1).split())

scripts = [(p, kind(p)) for p in tracked() if os.path.isfile(p)]
scripts = [(p, k) for p, k in scripts if k]
functions = set()  # defined in one script, called from those that source it
for path, k in scripts:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    sourced = [os.path.join(os.path.dirname(path), m) for m in
               re.findall(r'^\s*(?:\.|source)\s+"?\$\{?\w+\}?/([\w./-]+)"?', text, re.M)]
    for src in [path] + [q for q in sourced if os.path.isfile(q)]:
        with open(src, encoding="utf-8", errors="replace") as f:
            functions.update(re.findall(r"^\s*([A-Za-z_][\w-]*)\s*\(\)", f.read(), re.M))

problems = []
checked = 0
for path, k in scripts:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    optional = set(re.findall(r"(?:command -v|which|type)\s+([\w.+-]+)", text))
    body = make_recipes(text) if k == "make" else shell_lines(text)
    for w in commands(body):
        if (not w or "$" in w or "/" in w or "MAKEVAR" in w or w in BUILTINS or w in KEYWORDS
                or w in functions or "SUBST" in w or "ARITH" in w or w in optional or w in built or w.startswith("tfm-")
                or not re.match(r"^[\w.+-]+$", w) or re.match(r"^[\d.]+$", w)):
            continue
        checked += 1
        pkg = package_of(w)
        if pkg is None:
            problems.append(f"{path}: calls '{w}', which no installed Debian package provides")
        elif pkg not in allowed:
            problems.append(f"{path}: calls '{w}' (package {pkg}), which scripts/deps does not install")

for p in sorted(set(problems)):
    print("deps_programs:", p)
print(f"deps_programs: {checked} calls checked, {len(set(problems))} problems")
sys.exit(1 if problems else 0)
