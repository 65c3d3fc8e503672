#!/usr/bin/env python3
"""Writes the command-line flags Megatron-LM's parse_args accepts, with the type each value must
parse as, to tests/data/megatron-flags.json (read by tests/planner/export_rules_test.cc).

Megatron-LM needs torch (and more) to build its parser, which the test machines lack, so the
flags are read from the source instead (Python's ast, no import):
  * every parser/group.add_argument('--flag', ...) call in megatron/training/arguments.py;
  * every field of the dataclasses that arguments.py hands to ArgumentGroupFactory (e.g.
    TransformerConfig and its base ModelParallelConfig), named as
    megatron/training/argument_utils.py names them: --field-name, a bool defaulting to True as
    --no-field-name / --disable-field-name, Optional[T] as T, List[T] as T with nargs '+',
    Literal[...] as choices, an argparse_meta dict in the field's metadata taking precedence.

Usage: megatron_flags.py MEGATRON_GIT_DIR COMMIT > tests/data/megatron-flags.json
"""
import ast
import json
import subprocess
import sys


def show(git_dir, commit, path):
    return subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def python_files(git_dir, commit):
    out = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "--name-only", commit, "megatron"],
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split() if p.endswith(".py")]


def const(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return None


def type_name(node):
    """'int', 'float', 'str', 'bool' or None (a callable Parallax does not check) for type=..."""
    if isinstance(node, ast.Name) and node.id in ("int", "float", "str", "bool"):
        return node.id
    return None


def from_add_argument(call):
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
    if not names:
        return {}
    info = {"type": None}
    for kw in call.keywords:
        if kw.arg == "type":
            info["type"] = type_name(kw.value)
        elif kw.arg == "action":
            action = const(kw.value)
            if action in ("store_true", "store_false"):
                info["type"] = "flag"
        elif kw.arg == "nargs":
            info["nargs"] = const(kw.value)
        elif kw.arg == "choices":
            choices = const(kw.value)
            if isinstance(choices, (list, tuple)):
                info["choices"] = list(choices)
    if info["type"] is None and "choices" in info and all(isinstance(c, str) for c in info["choices"]):
        info["type"] = "str"
    return {n: info for n in names}


ENUMS = {}  # enum class name -> member names (an enum flag takes a member's name: config_type[cli_arg])


def annotation_kwargs(node):
    """The argparse kwargs argument_utils.ArgumentGroupFactory._extract_type infers, or None."""
    if isinstance(node, ast.Name) and node.id in ENUMS:
        return {"type": "str", "choices": ENUMS[node.id]}
    if isinstance(node, ast.Name):
        return {"type": node.id if node.id in ("int", "float", "str", "bool") else None}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return annotation_kwargs(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return None
    if isinstance(node, ast.Subscript):
        head = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        inner = node.slice
        parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        if head == "Optional":
            return annotation_kwargs(parts[0])
        if head == "Union":
            if len(parts) == 2 and isinstance(parts[1], ast.Constant) and parts[1].value is None:
                return annotation_kwargs(parts[0])
            return None  # needs argparse_meta
        if head in ("List", "list") and len(parts) == 1:
            k = annotation_kwargs(parts[0])
            if k is not None:
                k["nargs"] = "+"
            return k
        if head == "Literal":
            values = [const(p) for p in parts]
            kinds = {type(v).__name__ for v in values}
            return {"type": kinds.pop() if len(kinds) == 1 else None, "choices": values}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # T | None
        if isinstance(node.right, ast.Constant) and node.right.value is None:
            return annotation_kwargs(node.left)
        return None
    return {"type": None}  # an enum or other class: a callable type


def dataclass_flags(cls, classes, exclude):
    flags = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            flags.update(dataclass_flags(classes[base.id], classes, exclude))
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if name in exclude or name.startswith("_"):
            continue
        default, meta, init = None, None, True
        value = stmt.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "field":
            for kw in value.keywords:
                if kw.arg == "default":
                    default = const(kw.value)
                elif kw.arg == "init":
                    init = const(kw.value) is not False
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if const(k) == "argparse_meta" and isinstance(v, ast.Dict):
                            meta = {const(mk): mv for mk, mv in zip(v.keys, v.values)}
        elif value is not None:
            default = const(value)
        if not init:
            continue
        kwargs = annotation_kwargs(stmt.annotation) or {"type": None}
        names = ["--" + name.replace("_", "-")]
        if kwargs.get("type") == "bool":
            kwargs["type"] = "flag"
            if default is True:
                names = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
        if meta:
            if "arg_names" in meta and const(meta["arg_names"]):
                names = list(const(meta["arg_names"]))
            if "type" in meta:
                kwargs["type"] = type_name(meta["type"])
            if "nargs" in meta:
                kwargs["nargs"] = const(meta["nargs"])
            if "choices" in meta and isinstance(const(meta["choices"]), (list, tuple)):
                kwargs["choices"] = list(const(meta["choices"]))
            if "action" in meta and const(meta["action"]) in ("store_true", "store_false"):
                kwargs["type"] = "flag"
        for n in names:
            flags[n] = dict(kwargs)
    return flags


def main():
    git_dir, commit = sys.argv[1], sys.argv[2]
    args_py = ast.parse(show(git_dir, commit, "megatron/training/arguments.py"))
    flags = {}
    factories = []  # (class name, exclude list)
    lists = {}      # module-level and function-level list assignments (exclude = [...])
    for node in ast.walk(args_py):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = const(node.value)
            if isinstance(value, list):
                lists[node.targets[0].id] = value
    for node in ast.walk(args_py):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr == "add_argument":
            flags.update(from_add_argument(node))
        elif isinstance(fn, ast.Name) and fn.id == "ArgumentGroupFactory" and node.args and isinstance(node.args[0], ast.Name):
            exclude = []
            for kw in node.keywords:
                if kw.arg == "exclude":
                    exclude = const(kw.value) if const(kw.value) is not None else lists.get(getattr(kw.value, "id", ""), [])
            factories.append((node.args[0].id, set(exclude)))
    wanted = {name for name, _ in factories}
    classes = {}
    for path in python_files(git_dir, commit):
        text = show(git_dir, commit, path)
        if "class " not in text or ("dataclass" not in text and "Enum" not in text):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name not in classes:
                classes[node.name] = node
            if isinstance(node, ast.ClassDef) and any(getattr(b, "attr", getattr(b, "id", "")) == "Enum" for b in node.bases):
                ENUMS.setdefault(node.name, [t.targets[0].id for t in node.body
                                             if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)])
    generated = {}
    for name, exclude in factories:
        if name in classes:
            generated.update(dataclass_flags(classes[name], classes, exclude))
    for flag, info in generated.items():
        flags.setdefault(flag, info)  # an explicit add_argument wins
    missing = sorted(wanted - classes.keys())
    json.dump({"source": f"NVIDIA/Megatron-LM@{commit} megatron/training/arguments.py",
               "generated_from": sorted(wanted - set(missing)),
               "flags": dict(sorted(flags.items()))}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
