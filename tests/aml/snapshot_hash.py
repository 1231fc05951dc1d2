#!/usr/bin/python3
"""The Azure ML SDK's own answers, for tests/unit/test_aml_snapshot.c to compare
engine/azureml/snapshot.c and amlignore.c with.  Runs the real azure-ai-ml code
(Debian's python3-azure), never a copy of it:

  snapshot_hash.py [--component] DIR...
      one line per DIR: "<sdk> <ordered> <conflict> <count>" where <sdk> is
      get_content_hash(DIR, get_ignore_file(DIR)) as the SDK computes it
      (ComponentIgnoreFile(DIR) with --component, as for a command job's
      code), <ordered> the same with the ignore file's rules in file order,
      last match deciding (see below), <conflict> 1 when some file is
      matched both by a rule and by a '!' rule, and <count> the number of
      files hashed.  Then "I <blob>", the indicator file upload_directory
      picks (or "I -" for no file), and "B <blob>" for each blob name it
      uploads to, sorted: the SDK's upload_directory runs against a stand-in
      for its BlobStorageClient that records the names and sends nothing.
      All of it with DIR as the working directory (the SDK resolves a
      relative symlink against it) and the ordered rules.
  snapshot_hash.py --match CASES
      CASES holds lines "C" (a new case), "R <rule>" (a line of its ignore
      file) and "P <path>" (a path to test); prints for each P "1" (excluded)
      or "0", or for a case whose rules the SDK rejects one line "E <why>".
      Decisions are the ordered ones.
  snapshot_hash.py --batch FILE
      runs the lines of FILE, "hash DIR", "component DIR", "match CASES" or
      "lower FILE", in one process (importing azure.ai.ml takes a second),
      each one's output followed by a line "==".
  snapshot_hash.py --check-lower FILE
      FILE holds "<hex cp> <hex cp>..." lines: each code point whose
      lowercase (by snapshot.c's table) differs from itself; prints "ok" when
      that is exactly what Python's str.lower() does, else the differences.

Ordered: azure-ai-ml 1.4 (this Debian package) puts the rules in a set and
returns the answer of the first matching rule in set order, so for a path two
rules disagree on the answer changes with PYTHONHASHSEED.  Later releases keep
the file's order and let the last match win.  "Ordered" runs the SDK's own
IgnoreFile.is_file_excluded with its own GitWildMatchPattern objects, given
in reverse file order: its first match is then the file's last.

azure.ai.ml imports pydash, which Debian does not package; nothing on the
path used here calls it, so a stub module stands in for it."""
import os
import sys
import tempfile
import types
import warnings

warnings.simplefilter("ignore")


def stub_pydash():
    try:
        import pydash  # noqa: F401
        return
    except ImportError:
        pass

    def missing(*args, **kwargs):
        raise NotImplementedError("pydash is stubbed by tests/aml/snapshot_hash.py")

    pydash = types.ModuleType("pydash")
    objects = types.ModuleType("pydash.objects")
    for module in (pydash, objects):
        module.get = module.set_ = module.__getattr__ = lambda name, _m=missing: _m
    pydash.objects = objects
    sys.modules["pydash"] = pydash
    sys.modules["pydash.objects"] = objects


def import_sdk():
    stub_pydash()
    try:
        from azure.ai.ml._utils import _asset_utils
        from azure.ai.ml._utils._pathspec import GitWildMatchPattern
        from azure.ai.ml.entities._component.code import ComponentIgnoreFile
    except ImportError as e:
        sys.exit("snapshot_hash.py: cannot import the Azure ML SDK (%s): install the Debian "
                 "package python3-azure (make test-deps does)" % e)
    return _asset_utils, GitWildMatchPattern, ComponentIgnoreFile


def ordered(ignore, GitWildMatchPattern):
    """The same IgnoreFile, its rules in reverse file order (see the top)."""
    ignore._create_pathspec = lambda: [GitWildMatchPattern(line) for line in reversed(ignore._get_ignore_list())]
    return ignore


def conflict(ignore, root, GitWildMatchPattern):
    rules = [GitWildMatchPattern(line) for line in ignore._get_ignore_list()]
    rules = [r for r in rules if r.include is not None]
    for top, _, files in os.walk(root, followlinks=True):
        for name in files:
            rel = os.path.relpath(os.path.join(top, name), root)
            answers = {r.include for r in rules if r.match_file(rel) is not None}
            if len(answers) > 1:
                return 1
    return 0


class BlobStorageClient:
    """What upload_directory and upload_file use of the SDK's client of that
    name (they look at the class's name), recording blob names."""

    def __init__(self):
        self.overwrite = True
        self.indicator_file = None
        self.uploaded_file_count = 0
        self.names = []
        self.container_client = self

    def check_blob_exists(self):
        pass

    def upload_blob(self, name, data, **kwargs):
        self.names.append(name)


def upload_names(assets, d, ignore):
    client = BlobStorageClient()
    try:
        assets.upload_directory(client, d, "", "", False, ignore)
    except assets.EmptyDirectoryError:
        return "-", []
    return client.indicator_file, sorted(client.names)


def hash_dirs(dirs, component):
    assets, GitWildMatchPattern, ComponentIgnoreFile = import_sdk()
    for d in dirs:
        d = os.path.realpath(d)
        os.chdir(d)

        def make():
            return ComponentIgnoreFile(d) if component else assets.get_ignore_file(d)

        sdk = assets.get_content_hash(d, make())
        ig = ordered(make(), GitWildMatchPattern)
        pinned = assets.get_content_hash(d, ig)
        count = len(assets._get_upload_files_from_folder(d, ignore_file=ig))
        print(sdk, pinned, conflict(make(), d, GitWildMatchPattern), count)
        indicator, names = upload_names(assets, d, ig)
        print("I", indicator)
        for name in names:
            print("B", name)
        sys.stdout.flush()


def match(cases_file):
    assets, GitWildMatchPattern, _ = import_sdk()
    with open(cases_file, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    cases, cur = [], None
    for line in lines:
        if line == "C":
            cur = ([], [])
            cases.append(cur)
        elif line.startswith("R "):
            cur[0].append(line[2:])
        elif line.startswith("P "):
            cur[1].append(line[2:])
    with tempfile.TemporaryDirectory() as tmp:
        for rules, paths in cases:
            path = os.path.join(tmp, ".amlignore")
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write("".join(r + "\n" for r in rules))
            ig = ordered(assets.IgnoreFile(path), GitWildMatchPattern)
            try:
                answers = ["1" if ig.is_file_excluded(p) else "0" for p in paths]
            except Exception as e:  # the SDK rejects a rule: GitWildMatchPatternError, re.error
                print("E", type(e).__name__, str(e).replace("\n", " "))
                continue
            print("\n".join(answers))


def check_lower(path):
    c_side = {}
    with open(path) as f:
        for line in f:
            cp, *low = line.split()
            c_side[int(cp, 16)] = "".join(chr(int(x, 16)) for x in low)
    py_side = {cp: chr(cp).lower() for cp in range(0x110000) if chr(cp).lower() != chr(cp)}
    bad = sorted(set(c_side.items()) ^ set(py_side.items()))
    print("ok" if not bad else "differ: " + " ".join("U+%04X" % cp for cp, _ in bad[:20]))


def batch(path):
    commands = {"hash": lambda a: hash_dirs([a], False), "component": lambda a: hash_dirs([a], True),
                "match": match, "lower": check_lower}
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            cmd, _, arg = line.partition(" ")
            if cmd not in commands:
                sys.exit("snapshot_hash.py: unknown batch command %r" % cmd)
            commands[cmd](arg)
            print("==", flush=True)


def main(argv):
    if argv[:1] == ["--batch"] and len(argv) == 2:
        batch(argv[1])
    elif argv[:1] == ["--match"] and len(argv) == 2:
        match(argv[1])
    elif argv[:1] == ["--check-lower"] and len(argv) == 2:
        check_lower(argv[1])
    elif argv[:1] == ["--component"] and len(argv) > 1:
        hash_dirs(argv[1:], True)
    elif argv and not argv[0].startswith("-"):
        hash_dirs(argv, False)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
