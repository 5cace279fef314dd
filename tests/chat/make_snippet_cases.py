#!/usr/bin/env python3
"""Regenerates snippet_cases.json: small templates with the output Python jinja2 gives them (set up
as Hugging Face does, via tools/render_chat_template_jinja2.py), or "error" when jinja2 raises.
jinja_snippets_test.cpp renders each with tachyon and compares bytes.

  .venv/bin/python tests/chat/make_snippet_cases.py
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from render_chat_template_jinja2 import make_environment  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi \"there\" it's me\nline2 ünïcödé 🎉"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [
        {"type": "function", "function": {"name": "get", "arguments": {"q": "x", "n": 1.5}}}]},
]
CONTEXT = {"messages": MESSAGES, "x": 3, "s": "  Hello World  ", "lst": [3, 1, 2], "d": {"b": 2, "a": 1},
           "f": 2.5, "t": True, "n": None, "empty": [], "users": [{"name": "b", "age": 3},
                                                                   {"name": "a", "age": 1}]}

CASES = [
    # --- whitespace control, trim_blocks, lstrip_blocks ---
    "a\n{% if true %}\nb\n{% endif %}\nc",
    "a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
    "a\n  {%+ if true %}\n  b\n  {% endif +%}\nc",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "x {{- ' y ' -}} z",
    "x {{ 1 }}\n  {{ 2 }}\n",
    "line\n    {# comment #}\nnext",
    "line\n    {#- comment -#}\n   next",
    "  {{ 'a' }}  \n  {% set q = 1 %}  \n{{ q }}",
    "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n",
    "trailing\n\n",
    "{% raw %}{{ not evaluated }}{% endraw %}\n  {% raw -%}  x  {%- endraw %}",
    "\t{% if true %}tab{% endif %}",
    "{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n",
    "{%- for i in range(3) -%}\n  {{ i }},\n{%- endfor %}",
    "{{ 'a' }}{# c #}\n{{ 'b' }}",
    "\u00a0\u00a0{%- if true %}nbsp{% endif %}",
    # --- literals and printing ---
    "{{ none }} {{ None }} {{ true }} {{ False }} {{ 1 }} {{ -1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1e100 }}",
    "{{ [1, 'a', none, 1.0, true, [2], {'k': 'v'}] }}",
    "{{ {'a': 1, 'b': (1,), 'c': ()} }} {{ (1, 2) }}",
    "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\", 'back\\\\slash', 'tab\\t', '\\x01'] }}",
    "{{ 'a' 'b' \"c\" }} {{ '\\u00e9\\n\\x41\\101\\q' }}",
    "{{ ['é', '\\u00a0', '\\u200b', '🎉'] }}",
    "{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2**0.5 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }}",
    "{{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 2**10 }} {{ 2**-1 }} {{ 2**3**2 }} {{ -2**2 }} {{ (-2)**2 }}",
    "{{ 1_000 + 0x10 + 0o10 + 0b10 }}",
    "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true }}",
    "{{ true + 1 }} {{ 3 - 1.5 }} {{ x * f }}",
    # --- undefined semantics ---
    "[{{ missing }}] {{ missing is defined }} {{ missing is undefined }} {{ missing|default('d') }}",
    "{{ missing.attr }}",
    "{{ missing + 1 }}",
    "{{ missing ~ 'x' }} {{ missing|length }} {{ 'a' in missing }} {{ missing == missing }}",
    "{% for m in missing %}x{% else %}empty{% endfor %}",
    "{{ d.missing }}|{{ d['missing'] }}|{{ d.missing is defined }}",
    "{{ d.missing.deeper }}",
    "{{ n.attr }}|{{ n['k'] }}",
    "{{ x if false }}|{{ 'y' if true }}",
    "{{ missing() }}",
    # --- comparisons, logic ---
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ 'a' < 1 }}",
    "{{ 0 or 'x' }} {{ 1 and 2 }} {{ none or [] }} {{ not 0 }} {{ not 'a' }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ (1,) in [(1,)] }}",
    "{{ 1 in 'abc' }}",
    "{{ 'x' if x > 2 else 'y' }} {{ 'p' if x < 2 else 'q' if x < 3 else 'r' }}",
    "{{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1.0} }}",
    # --- tests ---
    "{{ x is number }} {{ t is number }} {{ t is integer }} {{ f is float }} {{ s is string }} {{ d is mapping }}",
    "{{ lst is iterable }} {{ s is iterable }} {{ x is iterable }} {{ lst is sequence }} {{ d is sequence }}",
    "{{ n is none }} {{ t is boolean }} {{ t is true }} {{ 1 is true }} {{ false is false }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}",
    "{{ 1 is eq 1 }} {{ 2 is equalto(2) }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 3 is gt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }}",
    "{{ 'b' is in 'abc' }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'x' is not upper }}",
    "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}",
    "{{ x is nonexistent_test }}",
    # --- attribute, subscript, slices ---
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages.0.role }}",
    "{{ lst[0] }} {{ lst[-1] }} {{ lst[5] }}|{{ lst[1:] }} {{ lst[:-1] }} {{ lst[::-1] }} {{ lst[::2] }}",
    "{{ s[2:7] }} {{ 'héllo'[1:4] }} {{ 'héllo'[-1] }} {{ 'héllo'[::-1] }} {{ 'abc'[5] }}|",
    "{{ messages[1:] | length }} {{ messages[::-1][0].role }}",
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z', 9) }} {{ d.get('z') }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ lst.append(4) }}",
    "{{ d.update({'c': 3}) }}",
    "{{ lst.index(1) }} {{ lst.count(3) }}",
    # --- string methods ---
    "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nhi\\n'.lstrip('\\n') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a  b  '.split(none, 1) }}",
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.upper() }} {{ 'HeLLo wORLD'.lower() }}",
    "{{ 'hello world'.title() }} {{ 'hello WORLD'.capitalize() }} {{ 'a-b'.replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 2) }}",
    "{{ 'hello'.find('l') }} {{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }}",
    "{{ ', '.join(['a', 'b']) }} {{ '{} and {}'.format('x', 1) }} {{ '{0}{name}'.format('a', name='b') }}",
    "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ ' '.isspace() }} {{ 'ab'.islower() }} {{ 'a1'.isalnum() }}",
    "{{ ''.join([1]) }}",
    "{{ 'x'.split('') }}",
    "{{ 'Hello</think>World'.split('</think>')[-1] }} {{ 'a</think>b</think>c'.split('</think>', 1)[1] }}",
    "{{ 'ab'.removeprefix('a') }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    # --- filters ---
    "[{{ s|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ s|length }} {{ lst|count }} {{ d|length }} {{ 'héllo'|length }}",
    "{{ none|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }}",
    "{{ 'hello world'|upper }} {{ 'HELLO'|lower }} {{ 'hello-world foo(bar)'|title }} {{ 'hELLO'|capitalize }}",
    "{{ 'a-b-c'|replace('-', '') }} {{ lst|join(', ') }} {{ lst|join }} {{ users|join(',', attribute='name') }}",
    "{{ lst|first }} {{ lst|last }} {{ 'abc'|first }} {{ empty|first }}|{{ d|first }}",
    "{{ 'abc'|list }} {{ d|list }} {{ lst|string }} {{ 42|string }}",
    "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 4.9|int }} {{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }}",
    "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }}",
    "{{ users|map(attribute='name')|list }} {{ lst|map('string')|join('-') }} {{ ['a','b']|map('upper')|list }}",
    "{{ lst|select('odd')|list }} {{ lst|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}",
    "{{ users|selectattr('age', 'gt', 2)|map(attribute='name')|list }} {{ users|rejectattr('age', 'equalto', 1)|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|selectattr('tool_calls')|list|length }}",
    "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {'B': 1, 'a': 2}|dictsort }}",
    "{{ lst|sort }} {{ lst|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }}",
    "{{ [1, 2, 1, 'a', 'A']|unique|list }} {{ lst|reverse|list }} {{ 'abc'|reverse }} {{ lst|max }} {{ lst|min }} {{ lst|sum }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}",
    "{{ 'one two  three'|wordcount }} {{ '<a>'|e }} {{ 'x'|safe }} {{ lst|batch(2)|list }}",
    "{{ 'abc'|center(9) }}|",
    "{{ lst|tojson }} {{ d|tojson }} {{ messages[1]|tojson }} {{ 'é\"\\n'|tojson }} {{ none|tojson }} {{ 1.0|tojson }}",
    "{{ d|tojson(indent=2) }} {{ lst|tojson(indent=2) }} {{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}",
    "{{ {'a': [], 'b': {}, 'c': [1, {'d': none}]}|tojson(indent=4) }}",
    "{{ 'é🎉'|tojson(ensure_ascii=true) }} {{ {1: 2, true: 3}|tojson }}",
    "{{ missing|tojson }}",
    "{{ x|nosuchfilter }}",
    "{{ x|xmlattr }}",
    "{{ lst|attr('count') is defined }} {{ d|attr('a') is defined }}",
    # --- set, namespace, scoping ---
    "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}{% set t = 1, 2 %}{{ t }}",
    "{% set ns = namespace(count=0, found=false) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }} {{ ns.found }}",
    "{% set v = 0 %}{% for i in range(3) %}{{ v }}{% set v = v + 1 %}{{ v }},{% endfor %}{{ v }}",
    "{% for i in range(3) %}{% if i == 1 %}{% set q = 5 %}{% endif %}[{{ q }}]{% endfor %}",
    "{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
    "{% set block %}  inner {{ x }}  {% endset %}[{{ block }}]",
    "{% set block | upper | trim %}  inner  {% endset %}[{{ block }}]",
    "{% set n2 = namespace(d) %}{{ n2.a }}{{ n2.b }}",
    "{% set x = 5 %}{{ x }}",
    "{{ x.y }}{% set x = 1 %}",
    "{% set lst2 = lst + [4] %}{{ lst2 }}{{ lst }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% set ns = 3 %}{% set ns.a = 1 %}",
    # --- loops ---
    "{% for i in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for i in lst %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
    "{% for i in lst %}{{ loop.cycle('a', 'b') }}{% endfor %} {% for i in [1,1,2] %}{{ loop.changed(i) }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(5) if i is odd %}{{ i }}{{ loop.length }}{% endfor %}",
    "{% for i in [] %}x{% else %}none{% endfor %} {% for i in range(4) if i > 9 %}x{% else %}filtered{% endfor %}",
    "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.depth }}{% endfor %}{{ loop.depth }}{% endfor %}",
    "{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
    "{% for a, b in ['xy', 'zw'] %}{{ a }}{{ b }}{% endfor %}",
    "{% for c in 'héy' %}[{{ c }}]{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for i in range(2, 10, 3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}",
    "{% for i in 5 %}{% endfor %}",
    "{% for i in range(1000000) %}{% endfor %}",
    "{% for m in messages %}{% set outer = loop %}{% for c in 'ab' %}{{ outer.index }}{{ c }}{% endfor %}{% endfor %}",
    # --- macros, call, filter blocks ---
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}",
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 9 %}{{ m() }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% macro args() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ args(1, 2, k=3) }}",
    "{% macro two(a) %}{{ a }}{% endmacro %}{{ two(1, 2) }}",
    "{% macro two(a) %}{{ a }}{% endmacro %}{{ two(1, b=2) }}",
    "{% macro two(a) %}{{ a }}{% endmacro %}{% call two(1) %}x{% endcall %}",
    "{% macro opt(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ opt(1) }}",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}",
    "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}",
    "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
    "{% macro inf() %}{{ inf() }}{% endmacro %}{{ inf() }}",
    # --- globals ---
    "{{ range(3)|list }} {{ range(1, 4)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}",
    "{{ raise_exception('custom failure') }}",
    "{% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}",
    "{{ range(200000)|length }}",
    # --- errors ---
    "{% if %}",
    "{% for x in %}{% endfor %}",
    "{% if true %}unclosed",
    "{{ 'unterminated }}",
    "{% endif %}",
    "{% include 'x' %}",
    "{% unknowntag %}",
    "{{ 1 + }}",
    "{{ (1 }}",
    "{# unclosed comment",
    "{% break %}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ x() }}",
    "{{ 'a' - 'b' }}",
    "{{ {'a': 1}['a'] }} {{ {'a': {'b': [1, 2]}}.a.b[1] }} {{ {'a': 1, 'a': 2} }}",
    # --- real template idioms ---
    "{%- if messages[0]['role'] == 'system' -%}{%- set system = messages[0]['content'] -%}{%- set rest = messages[1:] -%}{%- else -%}{%- set rest = messages -%}{%- endif -%}{{ system }}|{{ rest|length }}",
    "{%- for message in messages %}{%- if message.tool_calls is defined and message.tool_calls %}{%- for tc in message.tool_calls %}{{ tc.function.name }}:{{ tc.function.arguments|tojson }}{% endfor %}{% endif %}{% endfor %}",
    "{{ (messages|length - 1) - loop_index|default(0) }} {{ messages|length is divisibleby 3 }}",
    "{% set content = messages[1].content %}{{ content.split('\\n')[0].rstrip('\\n').split('it')[-1].lstrip(' ') }}",
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}{%- if ns.multi_step_tool and message.role == 'user' %}{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}{{ ns.last_query_index }}",
]


def main():
    env = make_environment()
    cases = []
    for source in CASES:
        case = {"template": source}
        try:
            case["expected"] = env.from_string(source).render(**CONTEXT)
        except Exception as error:  # jinja2 refused it: tachyon must fail too
            case["error"] = f"{type(error).__name__}: {error}"
        cases.append(case)
    out = {"context": CONTEXT, "cases": cases}
    path = os.path.join(HERE, "snippet_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
