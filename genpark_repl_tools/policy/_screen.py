"""The audit's fast path: decide from a cell's compiled code that the tree audit has nothing to say.

Most cells a model writes are plain: names, calls, arithmetic, comprehensions, attribute reads,
imports of allowed modules. For such a cell the static audit (`_audit`) finds nothing and the
rewrite (`_transform`) changes nothing, so the runner can run the code `compile()` made from the
source, without building a syntax tree, auditing it and compiling the tree again.

`CodeScreen.clean(code, source)` answers True only when it can show that from the code objects
themselves; anything it does not recognise answers False, and the cell takes the tree path, which
decides exactly as before. It is deny-by-default like the audit: every opcode it accepts is listed
below with the reason it cannot hide a construct the audit refuses or the rewrite changes, and it
is enabled only on the Python versions whose bytecode it was reviewed against (3.11, 3.12).
tests/policy/test_screen.py checks on a corpus of cells, attacks included, that a clean answer
always means the audit finds nothing and the rewrite leaves the tree as it is.

What each of the audit's rules becomes here:

* syntax the audit has not reviewed (async, except*, type parameters, ...): its opcodes are not
  listed, or its keyword is in the source (`_TEXT_GATES`);
* private and internal names: every name the code binds, loads or reads as an attribute is checked
  by its role (variables: no leading '_'; attributes: `attribute_refusal`), keyword-argument names
  (tuple constants) never start with '__';
* refused builtins and `pow()` (size-checked by the audit): never loaded as a variable;
* imports: each IMPORT_NAME's module and `from` names pass the same `import_refusal` /
  `imported_name_refusal`; relative imports and `import *` take the tree path;
* `finally`, handlers and `with` blocks (time-limit and generator rules, and the runner's timeout
  guards): their keywords take the tree path;
* attribute writes and routed attribute reads (the rewrite's work): their opcodes and names take the
  tree path; a function that writes no attribute needs no prologue;
* obviously huge constants: an arithmetic operation whose two operands could both be built from
  constants takes the tree path, which estimates its size (the compiler's own constant folding
  stays far below the audit's limits, which `clean` requires).
"""

from __future__ import annotations

import dis
import re
import sys
from itertools import compress
from types import CodeType

from ._rules import StaticRules

__all__ = ["REVIEWED_VERSIONS", "CodeScreen"]

REVIEWED_VERSIONS = ((3, 11), (3, 12))
ENABLED = sys.version_info[:2] in REVIEWED_VERSIONS

_OP = {name: code for name, code in dis.opmap.items() if code < 256}  # 3.12 lists pseudo-ops too


def _ops(*names: str) -> frozenset[int]:
    return frozenset(_OP[name] for name in names if name in _OP)


# Opcodes a clean cell may contain. Not listed, so never clean: attribute writes and deletes
# (rewritten), imports of everything (IMPORT_STAR), classes (LOAD_BUILD_CLASS: class-scope rules),
# annotations of attribute targets (SETUP_ANNOTATIONS), match statements (MATCH_*), async code
# (GET_AWAITABLE, BEFORE_ASYNC_WITH, ...), with blocks and handlers (BEFORE_WITH, CHECK_EXC_MATCH,
# CHECK_EG_MATCH, PREP_RERAISE_STAR), super() (LOAD_SUPER_ATTR), class and annotation scopes of
# 3.12 (LOAD_LOCALS, LOAD_FROM_DICT_OR_DEREF), the interactive PRINT_EXPR, and anything new.
_ALLOWED = _ops(
    # no effect of their own
    "CACHE", "NOP", "RESUME", "EXTENDED_ARG", "POP_TOP", "PUSH_NULL", "COPY", "SWAP", "END_FOR",
    # names: checked by their role below
    "LOAD_CONST", "RETURN_CONST", "RETURN_VALUE", "LOAD_NAME", "STORE_NAME", "DELETE_NAME",
    "LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR", "STORE_FAST", "DELETE_FAST", "LOAD_DEREF", "STORE_DEREF",
    "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_ATTR", "LOAD_METHOD",
    "IMPORT_NAME", "IMPORT_FROM",
    # operators (sizes: see _huge_operand), subscripts, displays, unpacking, f-strings
    "BINARY_OP", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE", "COMPARE_OP",
    "IS_OP", "CONTAINS_OP", "BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR", "BINARY_SLICE",
    "STORE_SLICE", "BUILD_SLICE", "BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP",
    "BUILD_CONST_KEY_MAP", "BUILD_STRING", "LIST_APPEND", "SET_ADD", "MAP_ADD", "LIST_EXTEND",
    "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE", "LIST_TO_TUPLE", "UNPACK_SEQUENCE", "UNPACK_EX",
    "FORMAT_VALUE",
    # calls and functions (keyword names: tuple constants, checked below)
    "PRECALL", "CALL", "KW_NAMES", "CALL_FUNCTION_EX", "MAKE_FUNCTION", "CALL_INTRINSIC_1",
    # control flow
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_IF_FALSE_OR_POP",
    "JUMP_IF_TRUE_OR_POP", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
    "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
    "GET_ITER", "FOR_ITER", "RAISE_VARARGS", "LOAD_ASSERTION_ERROR",
    # generators: the audit's generator rules concern finally, handlers and with blocks (text gates)
    "RETURN_GENERATOR", "YIELD_VALUE", "SEND", "GET_YIELD_FROM_ITER", "END_SEND", "CLEANUP_THROW",
    # the cleanup the compiler adds itself (inlined comprehensions, generators); a handler the code
    # wrote needs 'except', 'finally' or 'with' in the source
    "PUSH_EXC_INFO", "POP_EXCEPT", "RERAISE",
)  # fmt: skip
# CALL_INTRINSIC_1 (3.12) arguments that are plain operations; the others make type parameters and
# aliases, import *, print for the interactive mode, or wrap async generators.
_INTRINSICS: frozenset[int] = frozenset()
try:
    from opcode import _intrinsic_1_descs  # type: ignore[attr-defined]

    _INTRINSICS = frozenset(
        i
        for i, name in enumerate(_intrinsic_1_descs)
        if name in ("INTRINSIC_STOPITERATION_ERROR", "INTRINSIC_UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE")
    )
except ImportError:  # 3.11: no intrinsics
    pass

# Keywords of constructs whose rules need the tree: the time limit (finally, handlers, with),
# async code, `except*`.
_TEXT_GATES = ("finally", "except", "with", "async", "await")

# -1: not an opcode of this version (3.10 has no CACHE or BINARY_OP; the screen is off there).
_CACHE = _OP.get("CACHE", -1)
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_LOAD_CONST = _OP["LOAD_CONST"]
_BINARY_OP = _OP.get("BINARY_OP", -1)
_CALL_INTRINSIC_1 = _OP.get("CALL_INTRINSIC_1", -1)
_IMPORT_NAME = _OP["IMPORT_NAME"]
# The last instruction of an operand that might be built from constants only (what the audit's size
# estimate reads: constants, list and tuple displays, unary and binary operations).
_CONSTANT_ENDS = _ops(
    "LOAD_CONST", "BUILD_LIST", "BUILD_TUPLE", "LIST_EXTEND", "LIST_TO_TUPLE", "UNARY_NEGATIVE",
    "UNARY_INVERT", "UNARY_POSITIVE", "CALL_INTRINSIC_1", "BINARY_OP",
)  # fmt: skip
# BINARY_OP arguments the size estimate reads: +, *, ** and << (not their in-place forms).
_SIZED = frozenset(
    i
    for i, (name, _) in enumerate(getattr(dis, "_nb_ops", ()))  # 3.11+, where the screen is on
    if name in ("NB_ADD", "NB_MULTIPLY", "NB_POWER", "NB_LSHIFT")
)


def _mask(*names: str) -> bytes:
    """A `bytes.translate` table: 1 for the named opcodes, 0 for every other byte."""
    chosen = _ops(*names)
    return bytes(1 if op in chosen else 0 for op in range(256))


# The opcodes that name an entry of co_names, by role. "Shifted": the argument's lowest bit is a
# flag, the name's index is the rest (LOAD_GLOBAL from 3.11, LOAD_ATTR from 3.12).
_SHIFTED = ("LOAD_GLOBAL", "LOAD_ATTR") if sys.version_info >= (3, 12) else ("LOAD_GLOBAL",)
_LOADS = ("LOAD_NAME", "LOAD_GLOBAL")
_STORES = ("STORE_NAME", "DELETE_NAME", "STORE_GLOBAL", "DELETE_GLOBAL", "IMPORT_FROM")
_ATTRIBUTES = ("LOAD_ATTR", "LOAD_METHOD")
_NAME_OPS = (*_LOADS, *_STORES, *_ATTRIBUTES, "IMPORT_NAME")
_NAME_MASK = _mask(*(n for n in _NAME_OPS if n not in _SHIFTED))
_SHIFTED_MASK: bytes | None = _mask(*_SHIFTED)
_ROLE_MASKS = [
    (_mask(*(n for n in role if n not in _SHIFTED)), _mask(*(n for n in role if n in _SHIFTED)))
    for role in (_LOADS, _STORES, _ATTRIBUTES)
]
_INTRINSIC_MASK = _mask("CALL_INTRINSIC_1")
_COMPILER_NAME = re.compile(r"\.\d+")  # a comprehension's argument, `.0`
_NAMES_KEPT = 4096


def _roles(ops: bytes, args: bytes) -> tuple[set[int], set[int], set[int]]:
    """The indexes into co_names that the code loads as variables, stores or deletes, and reads as
    attributes."""
    found = []
    for plain, shifted in _ROLE_MASKS:
        indexes = set(compress(args, ops.translate(plain)))
        indexes.update(a >> 1 for a in compress(args, ops.translate(shifted)))
        found.append(indexes)
    return found[0], found[1], found[2]


def _plain(name: str) -> bool:
    """A name the audit accepts in every role a variable has (ASCII, no leading underscore)."""
    return name.isascii() and name.isidentifier() and not name.startswith("_")


class CodeScreen:
    """The fast path of one restricted policy's audit (see the module docstring).

    Security model: it only ever says "the tree audit would refuse nothing and rewrite nothing";
    saying False costs time, never safety. The runtime guards and the audit hook judge the code
    that runs either way.
    """

    def __init__(self, rules: StaticRules) -> None:
        self.rules = rules
        # Constant folding makes ints up to 128 bits and sequences up to 4096 items; the audit must
        # be known to accept those (the presets allow far more).
        self.enabled = ENABLED and rules.max_bits >= 1024 and rules.max_length >= 65536
        # Names already found acceptable in every role (variable, attribute), per policy.
        self._names: set[str] = set()

    def clean(self, code: CodeType, source: str) -> bool:
        """True if the audit has nothing to refuse in the cell `code` was compiled from, and the
        rewrite nothing to change; False if the tree must decide."""
        if not self.enabled or any(word in source for word in _TEXT_GATES):
            return False
        stack = [code]
        while stack:
            current = stack.pop()
            if not self._clean_one(current):
                return False
            stack.extend(c for c in current.co_consts if type(c) is CodeType)
        return True

    def _clean_one(self, code: CodeType) -> bool:
        # The instructions are read with C-level byte operations (translate to a 0/1 mask per
        # role, compress the arguments by it): a Python loop over every instruction would cost
        # about as much as the tree audit this replaces.
        raw = code.co_code
        ops = raw[::2]
        if not _ALLOWED.issuperset(ops) or _EXTENDED_ARG in ops:
            return False  # EXTENDED_ARG: over 255 names or constants, rare enough for the tree
        denied = self.rules.denied_builtins
        for name in (*code.co_varnames, *code.co_cellvars, *code.co_freevars):
            if not (_plain(name) and name not in denied) and not _COMPILER_NAME.fullmatch(name):
                return False
        for const in code.co_consts:
            # Keyword-argument names (and `from` names, checked again below) are tuple constants.
            if type(const) is tuple and any(type(c) is str and c.startswith("__") for c in const):
                return False
        if _BINARY_OP in ops and self._huge_operand(raw, ops):
            return False
        args = raw[1::2]
        intrinsics = _CALL_INTRINSIC_1 >= 0 and _CALL_INTRINSIC_1 in ops
        if intrinsics and not _INTRINSICS.issuperset(compress(args, ops.translate(_INTRINSIC_MASK))):
            return False
        names = code.co_names
        used = set(compress(args, ops.translate(_NAME_MASK)))
        if _SHIFTED_MASK is not None:
            used.update(a >> 1 for a in compress(args, ops.translate(_SHIFTED_MASK)))
        # Every name the compiler recorded is used by an instruction. A name nothing uses belonged to
        # code the compiler removed as unreachable (`if False:` bodies, statements after `return`):
        # it cannot run, but the tree audit judges it, so the tree decides.
        if len(used) != len(names):
            return False
        known = self._names
        roles: tuple[set[int], set[int], set[int]] | None = None
        for index, name in enumerate(names):
            if name in known:
                continue
            if self._plain_everywhere(name):
                if len(known) >= _NAMES_KEPT:
                    known.clear()
                known.add(name)
                continue
            # A name some role refuses (or a module path): judged by what the code does with it.
            if roles is None:
                roles = _roles(ops, args)
            loads, stores, attributes = roles
            if index in loads and not self._variable_ok(name):
                return False
            if index in stores and not _plain(name):
                return False
            if index in attributes and (
                name in self.rules.routed
                or name in ("format", "format_map")
                or self.rules.attribute_refusal(name) is not None
            ):
                return False
        modules = _IMPORT_NAME in ops
        if modules:
            unit = ops.find(_IMPORT_NAME)
            while unit >= 0:
                if not self._import_clean(names[args[unit]], ops, args, unit, code.co_consts):
                    return False
                unit = ops.find(_IMPORT_NAME, unit + 1)
        return True

    def _variable_ok(self, name: str) -> bool:
        return _plain(name) and name not in self.rules.denied_builtins and name != "pow"

    def _plain_everywhere(self, name: str) -> bool:
        rules = self.rules
        return (
            self._variable_ok(name)
            and name not in rules.routed
            and name not in ("format", "format_map")
            and rules.attribute_refusal(name) is None
        )

    def _import_clean(
        self, module: str, ops: bytes, args: bytes, unit: int, consts: tuple[object, ...]
    ) -> bool:
        # IMPORT_NAME always follows LOAD_CONST <level> and LOAD_CONST <fromlist>.
        if unit < 2 or ops[unit - 2] != _LOAD_CONST or ops[unit - 1] != _LOAD_CONST:
            return False
        level, fromlist = consts[args[unit - 2]], consts[args[unit - 1]]
        if type(level) is not int or level != 0:
            return False  # relative imports: the audit words the refusal
        rules = self.rules
        if not module.isascii() or rules.import_refusal(module) is not None:
            return False
        if fromlist is None:
            return True
        if type(fromlist) is not tuple:
            return False
        return all(
            type(n) is str and n != "*" and rules.imported_name_refusal(module, n) is None for n in fromlist
        )

    @staticmethod
    def _huge_operand(raw: bytes, ops: bytes) -> bool:
        """Whether some +, *, ** or << might have two operands built from constants only, whose
        result the audit's size estimate would have to judge."""
        at = ops.find(_BINARY_OP)
        while at >= 0:
            i = 2 * at
            if raw[i + 1] in _SIZED:
                right = _owner(ops, at - 1)
                if right >= 0 and ops[right] in _CONSTANT_ENDS:
                    if ops[right] != _LOAD_CONST:
                        return True  # a longer operand: the tree decides
                    left = _owner(ops, right - 1)  # no EXTENDED_ARG: checked first
                    if left >= 0 and ops[left] in _CONSTANT_ENDS:
                        return True
            at = ops.find(_BINARY_OP, at + 1)
        return False


def _owner(ops: bytes, unit: int) -> int:
    """The instruction a code unit belongs to (inline caches follow their instruction)."""
    while unit >= 0 and ops[unit] == _CACHE:
        unit -= 1
    return unit
