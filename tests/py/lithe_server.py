"""Starts `lithe serve` on a free loopback port for a test and stops it (SIGTERM) afterwards."""
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import DEFAULT_MODEL, LITHE


class LitheServer:
    def __init__(self, *args, model=DEFAULT_MODEL, env=None):
        e = dict(os.environ, LITHE_LOG="warn")
        e.update(env or {})
        self.proc = subprocess.Popen([str(LITHE), "serve", "-m", str(model), "--port", "0", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        self.stderr = []
        line = self.proc.stdout.readline()  # "lithe serve: listening on http://127.0.0.1:PORT (model NAME)"
        if "listening on" not in line:
            self.proc.kill()
            raise AssertionError(f"lithe serve did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split("listening on ")[1].split()[0]
        self.model = line.split("(model ")[1].rstrip(")\n")
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def stop(self, timeout=60):
        """SIGTERM, then waits; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def client(self, api_key="none", **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120, **kw)

    def metric(self, name):
        """The value of an unlabelled metric from /metrics."""
        import urllib.request
        text = urllib.request.urlopen(self.url + "/metrics", timeout=30).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def wait_metric(self, name, pred, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if pred(self.metric(name)):
                return True
            time.sleep(0.1)
        return False


def server_fixture(*args, **kw):
    """A module-scoped fixture running one server with these flags."""
    @pytest.fixture(scope="module")
    def fixture():
        s = LitheServer(*args, **kw)
        yield s
        s.stop()
    return fixture
