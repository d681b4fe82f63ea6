#!/usr/bin/env python3
"""A local stand-in for the Hugging Face hub, for tests/net/test_pull.c.

These machines cannot reach huggingface.co, so `shardwire pull` is tested
against this server, which speaks the hub's protocol as huggingface_hub sees
it (python stdlib only):

  HEAD/GET /ORG/NAME/resolve/REV/FILE
      LFS files (every *.gguf): 302 to an absolute CDN URL on another host
      name ("localhost" when the hub is "127.0.0.1", as the real hub sends
      cdn-lfs URLs), with X-Repo-Commit, X-Linked-Etag: "<sha256>",
      X-Linked-Size, ETag. Small files: 200 with the git blob sha1 as ETag.
      Errors carry X-Error-Code (RepoNotFound 401 without a valid token,
      EntryNotFound 404, RevisionNotFound 404) like the hub.
  GET /cdn/ORG/NAME/SHA256   the blob; Range: bytes=N- or bytes=N-M gives 206 +
      Content-Range (as the hub's CDN does); 416 past the end.
  GET /api/models/ORG/NAME[/revision/REV]   {"id", "sha", "siblings": [{"rfilename"}]}

The configuration (JSON, --config) lists repositories:
  {"repos": {"org/name": {"files": {"a.gguf": "/path/to/file", "README.md": {"text": "..."}},
                          "token": "secret",          # optional: private repo
                          "cut_after": 30000000,      # optional: the first `cuts` CDN
                          "cuts": 1,                  #   responses longer than N bytes stop
                                                      #   after N bytes
                          "stall_after": 3000000,     # optional: the first `stalls` CDN
                          "stalls": 1,                #   responses hang after N bytes
                          "stall_min_start": 0,       #   (those from this byte on)
                          "corrupt": true,            # optional: serve a flipped byte
                          "bad_commit": "../x",       # optional: a hostile X-Repo-Commit
                          "redirect_to": "org/other", # optional: renamed repo (relative 307)
                          "no_range": true,           # optional: the CDN ignores Range (200)
                          "bad_range": true           # optional: 206 with a Content-Range
                          }}}                         #   one byte off what was asked
Every request is appended to --log as one JSON line: method, path, range,
auth (the Authorization header or null), host; each CDN response body, when
it ends, as {"sent": BYTES, "path": ...}. The bound port is written to
--port-file once the server listens.
"""
import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

CHUNK = 1 << 20


class Blob:
    def __init__(self, path=None, text=None):
        self.path, self.text = path, text
        if text is not None:
            data = text.encode()
            self.size = len(data)
            self.sha256 = hashlib.sha256(data).hexdigest()
            self.git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        else:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    h.update(chunk)
            self.size = os.path.getsize(path)
            self.sha256 = h.hexdigest()
            self.git_sha1 = hashlib.sha1(self.sha256.encode()).hexdigest()

    def lfs(self):
        return self.text is None

    def read(self, start):
        if self.text is not None:
            yield self.text.encode()[start:]
            return
        with open(self.path, "rb") as f:
            f.seek(start)
            for chunk in iter(lambda: f.read(CHUNK), b""):
                yield chunk


class Hub:
    def __init__(self, config, log_path):
        self.repos = {}
        self.blobs = {}  # (repo, sha256) -> (Blob, repo config)
        self.cuts_done = {}
        self.lock = threading.Lock()
        self.log_path = log_path
        for name, rc in config["repos"].items():
            files = {}
            for fname, src in rc.get("files", {}).items():
                blob = Blob(text=src["text"]) if isinstance(src, dict) else Blob(path=src)
                files[fname] = blob
                self.blobs[(name, blob.sha256)] = (blob, rc)
            commit = hashlib.sha1(("commit:" + name).encode()).hexdigest()
            self.repos[name] = dict(rc, files=files, commit=commit)

    def log(self, entry):
        if self.log_path:
            with self.lock, open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None

    def log_message(self, *args):
        pass

    def _log(self):
        self.hub.log({"method": self.command, "path": self.path,
                      "range": self.headers.get("Range"),
                      "auth": self.headers.get("Authorization"),
                      "host": self.headers.get("Host")})

    def _reply(self, status, headers=None, body=b""):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status, code, message):
        self._reply(status, {"X-Error-Code": code, "X-Error-Message": message},
                    json.dumps({"error": message}).encode())

    def _repo(self, name):
        """The repository config, or None after an error reply."""
        repo = self.hub.repos.get(name)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        token = repo.get("token")
        if token and self.headers.get("Authorization") != "Bearer " + token:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        return repo

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self._log()
        path = unquote(self.path.split("?")[0])
        parts = path.strip("/").split("/")
        if parts[0] == "cdn" and len(parts) == 4:
            return self._cdn(parts[1] + "/" + parts[2], parts[3])
        if parts[0] == "api" and len(parts) >= 4 and parts[1] == "models":
            return self._api(parts[2] + "/" + parts[3], parts[5] if len(parts) >= 6 else "main")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        self._error(404, "NotFound", "no such route")

    def _api(self, name, rev):
        repo = self._repo(name)
        if repo is None:
            return
        body = {"id": name, "sha": repo["commit"],
                "siblings": [{"rfilename": f} for f in sorted(repo["files"])]}
        self._reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def _resolve(self, name, rev, fname):
        repo = self._repo(name)
        if repo is None:
            return
        if repo.get("redirect_to"):
            target = "/%s/resolve/%s/%s" % (repo["redirect_to"], rev, fname)
            return self._reply(307, {"Location": target})
        if rev not in ("main", repo["commit"]):
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        blob = repo["files"].get(fname)
        if blob is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        commit = repo.get("bad_commit", repo["commit"])
        if blob.lfs():
            host = self.headers.get("Host", "")
            cdn_host = host.replace("127.0.0.1", "localhost")
            return self._reply(302, {
                "Location": "http://%s/cdn/%s/%s?sig=standin" % (cdn_host, name, blob.sha256),
                "X-Repo-Commit": commit,
                "X-Linked-Etag": '"%s"' % blob.sha256,
                "X-Linked-Size": str(blob.size),
                "ETag": '"%s"' % blob.git_sha1})
        data = blob.text.encode()
        self._reply(200, {"X-Repo-Commit": commit, "ETag": '"%s"' % blob.git_sha1}, data)

    def _cdn(self, name, sha):
        entry = self.hub.blobs.get((name, sha))
        if entry is None:
            return self._error(404, "NotFound", "no such blob")
        blob, rc = entry
        start, last, ranged = 0, blob.size - 1, False
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and not rc.get("no_range"):
            a, _, b = rng[6:].partition("-")
            try:
                start = int(a)
                last = min(int(b), blob.size - 1) if b else blob.size - 1
            except ValueError:
                return self._reply(416, {"Content-Range": "bytes */%d" % blob.size})
            if start >= blob.size or last < start:
                return self._reply(416, {"Content-Range": "bytes */%d" % blob.size})
            ranged = start > 0 or last < blob.size - 1
        status = 206 if ranged else 200
        self.send_response(status)
        self.send_header("Content-Length", str(last + 1 - start))
        self.send_header("ETag", '"%s"' % blob.sha256)
        if not rc.get("no_range"):
            self.send_header("Accept-Ranges", "bytes")
        if ranged:
            off = 1 if rc.get("bad_range") else 0
            self.send_header("Content-Range",
                             "bytes %d-%d/%d" % (start + off, last + off, blob.size))
        self.end_headers()
        if self.command == "HEAD":
            return
        limit = stall = None
        with self.hub.lock:
            done = self.hub.cuts_done.get(("stall", name, sha), 0)
            if rc.get("stall_after") and done < rc.get("stalls", 1) and \
                    start >= rc.get("stall_min_start", 0):
                self.hub.cuts_done[("stall", name, sha)] = done + 1
                stall = rc["stall_after"]
            done = self.hub.cuts_done.get((name, sha), 0)
            if rc.get("cut_after") and done < rc.get("cuts", 1) and \
                    last + 1 - start > rc["cut_after"]:
                self.hub.cuts_done[(name, sha)] = done + 1
                limit = rc["cut_after"]
        self.logged = False
        try:
            self._send_body(blob, rc, start, last, limit, stall)
        finally:
            if not self.logged:
                self.hub.log({"sent": self.sent, "path": self.path})

    def _send_body(self, blob, rc, start, last, limit, stall):
        self.sent, pos = 0, start
        for chunk in blob.read(start):
            chunk = chunk[:last + 1 - pos]
            if not chunk:
                return
            if rc.get("corrupt") and pos <= blob.size // 2 < pos + len(chunk):
                i = blob.size // 2 - pos
                chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
            if stall is not None and self.sent + len(chunk) > stall:
                self.wfile.write(chunk[:stall - self.sent])
                self.wfile.flush()
                self.sent = stall
                # logged now, not after the sleep: a test counting the bytes of a later
                # (resumed) pull from this point of the log must not find this response's
                self.hub.log({"sent": self.sent, "path": self.path})
                self.logged = True
                time.sleep(120)  # the client gives up or is interrupted
                return
            if limit is not None and self.sent + len(chunk) > limit:
                self.wfile.write(chunk[:limit - self.sent])
                self.wfile.flush()
                self.sent = limit
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(chunk)
            self.sent += len(chunk)
            pos += len(chunk)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    args = ap.parse_args()
    with open(args.config) as f:
        Handler.hub = Hub(json.load(f), args.log)
    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a client that hangs up mid-body (tests interrupt pulls) is no error here

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
