"""An exact calculator for the generated arithmetic: ``+ - * /``, parentheses, integers and decimals, with the result
written as the generator writes its answers (``-0.62``, ``16/5``, ``32``), so a tool result the model copies into
``\\boxed{}`` is graded as the ground truth is written.

Why exact (``fractions.Fraction``, never float): ``0.1 + 0.2`` must come back ``0.3`` and ``-1 / -2`` as ``1/2``;
a float calculator would hand the model ``0.30000000000000004``. The example framework agents' ``calc`` tool
(``verl_ext.agent.examples.agents_sdk_calc`` / ``langgraph_calc``) calls ``calculate``.
"""

from __future__ import annotations

import ast
from decimal import Decimal
from fractions import Fraction

_OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}


def _value(node) -> tuple[Fraction, bool]:
    """(value, whether a decimal literal occurs) of an arithmetic AST; ValueError on anything else."""
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return Fraction(str(node.value)), isinstance(node.value, float)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v, d = _value(node.operand)
        return (-v if isinstance(node.op, ast.USub) else v), d
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        (a, da), (b, db) = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and b == 0:
            raise ValueError("division by zero")
        return _OPS[type(node.op)](a, b), da or db
    raise ValueError(f"unsupported expression {ast.dump(node)[:40]}")


def calculate(expr: str) -> str:
    """The value of ``expr``: an integer, a decimal (when the expression has a decimal literal and the value is not
    whole) or a fraction ``p/q``. ValueError for anything that is not ``+ - * /`` arithmetic (names, calls, powers,
    a syntax error, division by zero)."""
    try:
        tree = ast.parse(expr.strip().replace("×", "*").replace("÷", "/"), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"syntax error: {e.msg}") from None
    value, decimal = _value(tree)
    if value.denominator == 1:
        return str(value.numerator)
    if decimal:
        return format(Decimal(value.numerator) / Decimal(value.denominator), "f").rstrip("0").rstrip(".")
    return f"{value.numerator}/{value.denominator}"


def same_number(a: str, b: str) -> bool:
    """Whether two written numbers (integers, decimals, ``p/q``) are equal; False when either is not a number."""
    try:
        return Fraction(a.strip()) == Fraction(b.strip())
    except (ValueError, ZeroDivisionError):
        return False
