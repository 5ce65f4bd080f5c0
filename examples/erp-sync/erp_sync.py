#!/usr/bin/env python3
"""A small ERP driving oduflow: the whole contract, end to end.

It keeps a table of desired clients. Each change to it is written, in the
same transaction, to an outbox of its own; a pusher sends each outbox row
to oduflow's API with the row's Idempotency-Key (a retry after a lost
answer acts once), and a webhook receiver applies the state changes
oduflow reports, after checking their signatures. Python's standard
library only.

    erp_sync.py --db erp.db want acme --region ewr --plan vc2-1c-1gb --os-id 2284 --volume-gb 40
    erp_sync.py --db erp.db drop acme
    erp_sync.py --db erp.db run --api http://127.0.0.1:8080 --token odf_... \\
        --secret HEX --listen 127.0.0.1:9000
    erp_sync.py --db erp.db status
"""
import argparse, hashlib, hmac, http.server, json, sqlite3, threading, time, urllib.error, urllib.request, uuid

TOLERANCE_S = 300  # oduflow signs with its clock; older signatures are replays
PUSH_EVERY_S = 0.5


def db(path):
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    c.executescript("""
        CREATE TABLE IF NOT EXISTS desired (name TEXT PRIMARY KEY, spec TEXT, present INTEGER);
        CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, name TEXT, spec TEXT, present INTEGER,
            idem_key TEXT, answer TEXT, sent INTEGER DEFAULT 0);
        CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, kind TEXT, reason TEXT, position INTEGER);""")
    return c


def change(c, name, spec, present):
    """The desired state and its outbox row, in one transaction."""
    c.execute("BEGIN IMMEDIATE")
    c.execute("INSERT OR REPLACE INTO desired VALUES (?, ?, ?)", (name, json.dumps(spec), present))
    c.execute("INSERT INTO outbox (name, spec, present, idem_key) VALUES (?, ?, ?, ?)",
              (name, json.dumps(spec), present, str(uuid.uuid4())))
    c.execute("COMMIT")


def push(c, api, token):
    """Sends each unsent outbox row, oldest first; a row whose answer was lost
    (no connection, 5xx) is sent again later with the same key."""
    for oid, name, spec, present, key in c.execute(
            "SELECT id, name, spec, present, idem_key FROM outbox WHERE sent = 0 ORDER BY id").fetchall():
        body = json.dumps(dict(json.loads(spec), name=name)).encode() if present else None
        req = urllib.request.Request(f"{api}/api/v1/clients/{name}", data=body,
                                     method="PUT" if present else "DELETE")
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Idempotency-Key", key)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                answer = f"{r.status} {r.read().decode()}"
        except urllib.error.HTTPError as e:
            answer = e.read().decode()
            if e.code >= 500 or "idempotency_key_in_progress" in answer:
                return  # not decided yet: the same key again at the next push
            answer = f"{e.code} {answer}"  # refused: for a person to read
        except OSError:
            return
        c.execute("UPDATE outbox SET sent = 1, answer = ? WHERE id = ?", (answer, oid))


def receiver(path, secret):
    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ts = self.headers.get("Oduflow-Timestamp", "")
            want = "v1=" + hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
            fresh = ts.isdigit() and abs(time.time() - int(ts)) <= TOLERANCE_S
            if not fresh or not hmac.compare_digest(want, self.headers.get("Oduflow-Signature", "")):
                self.send_response(401)
                self.end_headers()
                return
            e = json.loads(body)
            # At least once: an event already applied (its position or an
            # older one for this client) changes nothing.
            if e.get("client"):
                db(path).execute(
                    "INSERT INTO state VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, "
                    "reason = excluded.reason, position = excluded.position WHERE excluded.position > state.position",
                    (e["client"], e["kind"], e["detail"].get("reason"), e["position"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass
    return Hook


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("want")
    w.add_argument("name")
    for f in ("--region", "--plan"):
        w.add_argument(f, required=True)
    for f in ("--os-id", "--volume-gb"):
        w.add_argument(f, type=int, required=True)
    sub.add_parser("drop").add_argument("name")
    r = sub.add_parser("run")
    for f in ("--api", "--token", "--secret", "--listen"):
        r.add_argument(f, required=True)
    sub.add_parser("status")
    a = p.parse_args()
    c = db(a.db)
    if a.cmd == "want":
        change(c, a.name, {"region": a.region, "plan": a.plan, "os_id": a.os_id, "volume_gb": a.volume_gb}, 1)
    elif a.cmd == "drop":
        change(c, a.name, {}, 0)
    elif a.cmd == "status":
        print(json.dumps({n: {"kind": k, "reason": r} for n, k, r, _ in c.execute("SELECT * FROM state")}))
    else:
        host, port = a.listen.rsplit(":", 1)
        server = http.server.ThreadingHTTPServer((host, int(port)), receiver(a.db, a.secret))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"erp_sync: webhooks on http://{a.listen}/, pushing to {a.api}", flush=True)
        while True:
            push(c, a.api, a.token)
            time.sleep(PUSH_EVERY_S)


if __name__ == "__main__":
    main()
