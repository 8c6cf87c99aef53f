"""A made-up release dir in the documented layout (written by the tests, never copied from anywhere).

Four Chinese query pairs; gold with weighted nuggets citing an evidence pool; the candidates and
clarify-only files of two systems, whose UA unknown rates and region-only questions are known by
construction (:data:`KNOWN`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PAIRS: tuple[tuple[str, str, str], ...] = (
    ("q1", "推荐一款适合新手的相机", "2024年在上海买适合新手的微单相机推荐，预算五千元"),
    ("q2", "这个周末去哪里看展览", "本周末北京798艺术区有哪些免费的摄影展览"),
    ("q3", "怎么办理居住证", "外地户口在杭州办理居住证需要哪些材料，2025年"),
    ("q4", "哪款电动车续航长", "2024年续航超过600公里的国产纯电轿车有哪些"),
)
"""(id, blurred_query, fused_query) of each made-up instance."""

NUGGETS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "q1": (("索尼ZV-E10适合新手，价格约五千元", 3), ("上海门店可以试用", 1)),
    "q2": (("798艺术区本周末有免费摄影展", 3), ("展览位于北京朝阳区", 2)),
    "q3": (("需要身份证和租房合同", 3), ("杭州居住证在派出所办理", 2)),
    "q4": (("比亚迪汉续航超过600公里", 2), ("蔚来ET7续航超过600公里", 2)),
}

ANSWERS: Mapping[str, str] = {
    "q1": "推荐索尼ZV-E10，适合新手，价格约五千元。",
    "q2": "798艺术区本周末有免费摄影展，位于北京朝阳区。",
    "q3": "需要身份证。",
    "q4": "没有找到相关信息。",
}
ORIG_ANSWERS: Mapping[str, str] = {
    "q1": "相机有很多种。",
    "q2": "可以去博物馆。",
    "q3": "需要身份证和租房合同。",
    "q4": "电动车很多。",
}

# Per system (name, k): per instance, (question, answer) pairs. Region-only questions ask 哪个城市/哪个地区.
CLARIFY: Mapping[tuple[str, int], Mapping[str, Sequence[tuple[str, str]]]] = {
    ("eb", 1): {
        "q1": [("您在哪个城市购买？", "上海")],
        "q2": [("您在哪个城市？", "北京")],
        "q3": [("您想在哪个城市办理？", "unknown")],
        "q4": [("您关注哪一年的车型？", "2024年")],
    },
    ("gp", 2): {
        "q1": [("您的预算是多少？", "五千元"), ("您在哪个城市购买？", "上海")],
        "q2": [("您想看什么类型的展览？", "摄影展"), ("您在哪个地区？", "unknown")],
        "q3": [("您是什么户口类型？", "unknown"), ("您在哪个城市？", "unknown")],
        "q4": [("您关注哪一年的车型？", "unknown"), ("您需要多长的续航？", "unknown")],
    },
}
KNOWN: Mapping[tuple[str, int], Mapping[str, float]] = {
    # ua_unknown_rate = unknown answers / answers; all_unknown_rate = instances with every answer unknown
    ("eb", 1): {"ua_unknown_rate": 1 / 4, "all_unknown_rate": 1 / 4, "region_only_count": 3, "known_cnt_1": 3 / 4},
    ("gp", 2): {"ua_unknown_rate": 5 / 8, "all_unknown_rate": 2 / 4, "region_only_count": 3, "known_cnt_2": 1 / 4},
}
"""The UA diagnostics of each system's clarify-only file, by construction."""


def jsonl(path: Path, rows: Iterable[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def csv_text(rows: Sequence[Sequence[str]], crlf: bool = True) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator="\r\n" if crlf else "\n").writerows(rows)
    return buf.getvalue()


def queries_csv(path: Path, with_id: bool = True, bom: bool = True, crlf: bool = True) -> Path:
    header = ["id", "blurred_query", "fused_query"] if with_id else ["blurred_query", "fused_query"]
    rows = [[i, b, f] if with_id else [b, f] for i, b, f in PAIRS]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((("\ufeff" if bom else "") + csv_text([header, *rows], crlf)).encode("utf-8"))
    return path


def gold_record(iid: str, key: str = "id") -> dict[str, Any]:
    nuggets = [{"text": t, "weight": w, "evidence_ids": [f"{iid}-e{j}"]} for j, (t, w) in enumerate(NUGGETS[iid], 1)]
    evidence = [
        {"id": f"{iid}-e{j}", "title": f"来源{j}", "url": f"https://example.org/{iid}/{j}", "snippet": t}
        for j, (t, _) in enumerate(NUGGETS[iid], 1)
    ]
    fused = next(f for i, _, f in PAIRS if i == iid)
    head = {key: iid} if key != "fused_query" else {}
    return {
        **head,
        "fused_query": fused,
        "nuggets": nuggets,
        "evidence": evidence,
        "must_cover": ["子问题"],
        "missing_evidence": [],
        "unsupported_claims": [],
    }


def write_release(root: Path, with_id: bool = True) -> Path:
    """The release dir ``root`` (``release/``): data, gold, candidates and clarify-only files."""
    queries_csv(root / "data" / "hard_518_queries.csv", with_id=with_id)
    key = "id" if with_id else "fused_query"
    jsonl(root / "data" / "gold_public_hard518.jsonl", (gold_record(i, key) for i, _, _ in PAIRS))
    for (system, k), per_id in CLARIFY.items():
        jsonl(
            root / "results" / "candidates" / f"{system}k{k}__cand_hard518.jsonl",
            ({"id": i, "answer": ANSWERS[i]} for i in per_id),
        )
        jsonl(
            root / "results" / "clarify_only" / f"{system}k{k}__clarify_hard518.jsonl",
            (
                {"id": i, "questions": [q for q, _ in qa], "answers": [a for _, a in qa], "rewritten_query": f"{i}改写"}
                for i, qa in per_id.items()
            ),
        )
    jsonl(
        root / "results" / "candidates" / "orig__cand_hard518.jsonl",
        ({"id": i, "answer": a} for i, a in ORIG_ANSWERS.items()),
    )
    return root
