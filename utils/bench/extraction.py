"""Structured extraction on `cli.py serve`: fields copied out of pasted documents into a JSON schema
(`format`), speculated in process, against the same server asked with `X-Speculation: off`.

    python cli.py bench-extract [--model qwen2.5-coder:1.5b] [--drafter suffix] [--documents 12]
        [--max-tokens 240]

The documents are invoices made up from a fixed seed (number, vendor, date, customer, address, two to
four items, total): each answer copies its document's values into the schema's keys, and the answers
share the schema's skeleton, which a suffix drafter learns from the answers before. Each document is
asked both ways, the order alternating, after its prompt was evaluated once unmeasured; the ratio of
the client-side tokens per second (eval_count over wall time) is taken per document. It also prints
the whole run's answering time each way, how many answers were identical both ways (greedy: all must
be), and how many validated against the schema (all must).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import httpx
import jsonschema

from utils.burst import NO_SPECULATION
from utils.embedded.server import EmbeddedServer

SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["invoice", "vendor", "date", "customer", "address", "items", "total", "currency"],
    "properties": {
        "invoice": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
        "vendor": {"type": "string", "maxLength": 40},
        "date": {"type": "string", "format": "date"},
        "customer": {"type": "string", "maxLength": 40},
        "address": {"type": "string", "maxLength": 80},
        "items": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "quantity", "unit_price"],
            "properties": {"name": {"type": "string", "maxLength": 40},
                           "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                           "unit_price": {"type": "number"}}}},
        "total": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
    },
}
VENDORS = ["Northwind Traders", "Contoso Ltd", "Fabrikam Inc", "Tailspin Toys", "Wingtip Supplies"]
PEOPLE = ["Alice Martin", "Bruno Rossi", "Chen Li", "Dana Kowalski", "Emil Novak", "Fatima Haddad", "Goran Ilic"]
STREETS = ["12 Rue de la Paix, Paris", "4 Via Roma, Milan", "88 Rua Augusta, Lisbon", "3 Florianska, Krakow",
           "19 Narodni, Prague", "7 Hamra Street, Beirut", "25 Ilica, Zagreb"]
GOODS = ["Blue Widget", "Red Gadget", "Steel Bracket", "Oak Shelf", "USB Cable", "Desk Lamp", "Paper Ream"]


def documents(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    made = []
    for n in range(count):
        items = [(rng.choice(GOODS), rng.randint(1, 12), round(rng.uniform(1, 60), 2))
                 for _ in range(rng.randint(2, 4))]
        total = sum(quantity * price for _, quantity, price in items)
        lines = "\n".join(f"- {quantity} x {name} at {price:.2f} each" for name, quantity, price in items)
        made.append(f"INVOICE INV-{rng.randint(1000, 9999)}\nFrom: {rng.choice(VENDORS)}\n"
                    f"Date: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}\n"
                    f"Bill to: {PEOPLE[n % len(PEOPLE)]}, {rng.choice(STREETS)}\nItems:\n{lines}\n"
                    f"Total due: {total:.2f} {rng.choice(['EUR', 'USD', 'GBP'])}\nPayment within 30 days.")
    return made


def _answer(http: httpx.Client, model: str, document: str, max_tokens: int, headers: dict[str, str],
            num_predict: int | None = None) -> tuple[int, float, str, dict]:
    body = {"model": model, "stream": False, "format": SCHEMA,
            "messages": [{"role": "user", "content": f"Extract this invoice's fields as JSON.\n\n{document}"}],
            "options": {"temperature": 0, "num_predict": num_predict or max_tokens}}
    started = time.perf_counter()
    reply = http.post("/api/chat", json=body, headers=headers)
    wall = time.perf_counter() - started
    reply.raise_for_status()
    final = reply.json()
    return final.get("eval_count") or 0, wall, final["message"]["content"], final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-extract", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder:1.5b")
    parser.add_argument("--drafter", default="suffix")
    parser.add_argument("--documents", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=240)
    args = parser.parse_args(argv)
    ratios: list[float] = []
    seconds = {"off": 0.0, "on": 0.0}
    identical = valid = accepted = drafted = 0
    with EmbeddedServer(speculation=True, args=["--pair", f"{args.model}={args.drafter}"]) as server, \
            httpx.Client(base_url=server.url, timeout=600) as http:
        _answer(http, args.model, documents(1, seed=0)[0], 8, NO_SPECULATION)  # load the model
        for index, document in enumerate(documents(args.documents)):
            _answer(http, args.model, document, 1, NO_SPECULATION, num_predict=1)  # its prompt, once
            sides = ["off", "on"] if index % 2 == 0 else ["on", "off"]
            answers = {side: _answer(http, args.model, document, args.max_tokens,
                                     NO_SPECULATION if side == "off" else {}) for side in sides}
            speed = {side: tokens / wall for side, (tokens, wall, _, _) in answers.items()}
            ratios.append(speed["on"] / speed["off"])
            for side, (_, wall, _, _) in answers.items():
                seconds[side] += wall
            identical += answers["on"][2] == answers["off"][2]
            try:
                jsonschema.validate(json.loads(answers["on"][2]), SCHEMA)
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                pass
            summary = answers["on"][3].get("speculative") or {}
            accepted, drafted = accepted + summary.get("accepted_tokens", 0), drafted + summary.get("draft_tokens", 0)
            print(f"  invoice {index + 1:2}: off {speed['off']:5.1f} tok/s, on {speed['on']:5.1f} tok/s, "
                  f"ratio {ratios[-1]:.2f} ({summary.get('accepted_tokens', 0)} of {answers['on'][0]} tokens "
                  "from accepted drafts)", flush=True)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"\n{args.model} with {args.drafter}, `format` (a JSON schema), greedy, {args.documents} invoices; "
          f"speculating tok/s over X-Speculation: off tok/s:")
    print(f"  median {statistics.median(ratios):.2f}x ({quartiles[0]:.2f}-{quartiles[2]:.2f}); later half "
          f"{statistics.median(ratios[len(ratios) // 2:]):.2f}x; the whole run as answering time "
          f"{seconds['off'] / seconds['on']:.3f}x ({seconds['off']:.1f} s off, {seconds['on']:.1f} s on)")
    print(f"  identical both ways: {identical} of {len(ratios)}; valid against the schema: {valid} of {len(ratios)}; "
          f"drafted tokens accepted: {accepted} of {drafted}")
    return 0 if identical == valid == len(ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
