"""`make lab` starts: the JupyterLab server of :mod:`gpulab.course.lab` (as root too, where CI runs), headless on
localhost, serves the lesson notebooks and starts a notebook's kernel, with the course's nbgrader configuration found;
then it is stopped. Part of `make test`'s course step (about 15 s on two cores)."""

import json
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

from gpulab.course import lab

pytest.importorskip("jupyterlab")
pytestmark = pytest.mark.pipeline

NOTEBOOK = "00_memory_hierarchy.ipynb"


def test_lab_command_allows_root_only_for_root():
    assert "--allow-root" in lab.lab_command(as_root=True)
    assert "--allow-root" not in lab.lab_command(as_root=False)
    assert lab.lab_command("--no-browser", as_root=False)[-1] == "--no-browser"


def test_course_links_lay_solutions_out_for_nbgrader(tmp_path):
    links = lab.link_course(tmp_path)
    assert links and all(p.is_symlink() for p in links)
    first = tmp_path / "source" / NOTEBOOK[:-6] / NOTEBOOK
    assert first in links and first.read_bytes() == (lab.ROOT / "solutions" / NOTEBOOK).read_bytes()
    assert lab.link_course(tmp_path) == links  # again: the same links


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base, token, path, method="GET", body=None, timeout=10):
    req = urllib.request.Request(
        f"{base}/api/{path}", method=method, data=None if body is None else json.dumps(body).encode()
    )
    req.add_header("Authorization", f"token {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data = resp.read()
    return json.loads(data) if data else None


def _wait(what, probe, timeout, server, log):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"the lab server exited ({server.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        try:
            result = probe()
            if result:
                return result
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"{what} took over {timeout} s:\n{log.read_text()[-3000:]}")


def _run_in_kernel(port, token, kernel, code, timeout=120) -> str:
    """Run ``code`` in the kernel through the server's websocket (as the lab's notebook does); its printed text."""
    import websocket  # websocket-client, a dependency of jupyter_server

    ws = websocket.create_connection(f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels?token={token}",
                                     timeout=timeout)  # fmt: skip
    try:
        msg_id, session = uuid.uuid4().hex, uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "test", "session": session, "msg_type": "execute_request",
                  "version": "5.3"}  # fmt: skip
        content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
        ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content,
                            "channel": "shell", "buffers": []}))  # fmt: skip
        out, end = "", time.monotonic() + timeout
        while time.monotonic() < end:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                pytest.fail(f"the kernel raised: {msg['content']}")
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
        pytest.fail(f"the kernel did not finish {code!r} in {timeout} s")
    finally:
        ws.close()


def test_lab_serves_the_notebooks_and_starts_a_kernel(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    lab.link_course()
    log = tmp_path / "lab.log"
    command = lab.lab_command("--no-browser", "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
                              "--ServerApp.port_retries=0")  # fmt: skip
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=lab.ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait("the server answered", lambda: _api(base, token, "status"), 90, server, log)
        listing = {item["name"] for item in _api(base, token, "contents")["content"]}
        assert NOTEBOOK in listing and "04_flash_attention.ipynb" in listing, sorted(listing)
        body = {"path": NOTEBOOK, "type": "notebook", "name": NOTEBOOK, "kernel": {"name": "python3"}}
        session = _api(base, token, "sessions", "POST", body)
        assert _run_in_kernel(port, token, session["kernel"]["id"], "print(6 * 7)") == "42\n"
        _api(base, token, f"sessions/{session['id']}", "DELETE")
        text = log.read_text()
        assert "No nbgrader_config.py" not in text, text[-3000:]
        assert "Running as root is not recommended" not in text or "--allow-root" in " ".join(command)
        _api(base, token, "shutdown", "POST")
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
