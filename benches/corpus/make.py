"""Writes the compression corpus of benches/run-deflate.sh, deterministically:

- chat.jsonl: 1 000 chat events as a chat server sends them, one JSON
  object per line (messages, joins, typing notices, reactions), from 40
  users in 6 rooms, with text drawn from everyday phrases;
- doc.json: one larger JSON document (about 100 KiB), an API response
  listing 120 orders with customers, items and addresses.

Run `python3 benches/corpus/make.py` to write them again; the files are
committed so that every measurement reads the same bytes.
"""

import json
import random
from pathlib import Path

rng = random.Random(7692)
here = Path(__file__).parent

first = ["ana", "ben", "chen", "dara", "eli", "farah", "gus", "hana", "ivan", "jo",
         "kemal", "lena", "mateo", "nia", "omar", "priya", "quinn", "rosa", "sami", "tariq"]
users = [{"id": 1000 + i, "name": f"{first[i % 20]}{'' if i < 20 else '_' + str(i)}",
          "avatar": f"https://cdn.example.com/avatars/{1000 + i}.png"} for i in range(40)]
rooms = ["general", "random", "engineering", "design", "support", "announcements"]
phrases = [
    "sounds good to me", "can you take a look at this?", "I'll be a few minutes late",
    "the build is green again", "thanks!", "has anyone seen the latest numbers?",
    "let's move this to tomorrow", "lunch at noon?", "I pushed a fix for the login bug",
    "the deploy finished without errors", "what time is the meeting?", "looks great",
    "I think we should ship it", "can we keep the old behaviour behind a flag?",
    "the customer replied, they are happy with the change", "+1", "on it",
    "the dashboard is slow again this morning", "I'm working from home today",
    "see the ticket for details", "good catch", "let me check and get back to you",
]
emoji = ["thumbs_up", "heart", "laughing", "eyes", "rocket", "tada"]

ts = 1_764_700_000_000
lines = []
for n in range(1000):
    ts += rng.randint(200, 9000)
    user = rng.choice(users)
    room = rng.choice(rooms)
    kind = rng.choices(["message", "typing", "reaction", "join"], [70, 15, 10, 5])[0]
    event = {"type": kind, "room": room, "ts": ts, "user": user}
    if kind == "message":
        words = " ".join(rng.choice(phrases) for _ in range(rng.randint(1, 3)))
        event.update({"id": f"msg_{ts:x}_{n}", "text": words,
                      "mentions": [rng.choice(users)["name"]] if rng.random() < 0.2 else []})
    elif kind == "reaction":
        event.update({"target": f"msg_{ts - rng.randint(1000, 90000):x}", "emoji": rng.choice(emoji)})
    lines.append(json.dumps(event, separators=(",", ":")))
(here / "chat.jsonl").write_text("\n".join(lines) + "\n")

streets = ["Main St", "Oak Ave", "Elm St", "Park Rd", "Lake Dr", "Hill St", "River Rd"]
cities = [("Lisbon", "PT"), ("Berlin", "DE"), ("Austin", "US"), ("Osaka", "JP"),
          ("Lagos", "NG"), ("Lyon", "FR"), ("Pune", "IN")]
products = [("SKU-1001", "Wireless mouse", 24.99), ("SKU-1002", "USB-C cable 2 m", 9.99),
            ("SKU-1003", "Mechanical keyboard", 89.0), ("SKU-1004", "27-inch monitor", 249.0),
            ("SKU-1005", "Laptop stand", 39.5), ("SKU-1006", "Noise-cancelling headphones", 199.0),
            ("SKU-1007", "Webcam 1080p", 59.9), ("SKU-1008", "Desk lamp", 29.0)]
orders = []
for n in range(120):
    city, country = rng.choice(cities)
    items = []
    for sku, name, price in rng.sample(products, rng.randint(1, 4)):
        qty = rng.randint(1, 3)
        items.append({"sku": sku, "name": name, "quantity": qty, "unit_price": price,
                      "total": round(qty * price, 2)})
    user = rng.choice(users)
    orders.append({
        "id": f"ord_{90000 + n}", "status": rng.choice(["paid", "shipped", "delivered", "refunded"]),
        "created_at": f"2026-11-{rng.randint(1, 30):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        "customer": {"id": user["id"], "name": user["name"], "email": f"{user['name']}@example.com"},
        "shipping_address": {"line1": f"{rng.randint(1, 999)} {rng.choice(streets)}", "city": city,
                             "country": country, "postal_code": f"{rng.randint(10000, 99999)}"},
        "items": items, "currency": "EUR",
        "total": round(sum(i["total"] for i in items), 2),
    })
doc = {"object": "list", "has_more": False, "data": orders}
(here / "doc.json").write_text(json.dumps(doc, indent=2) + "\n")
