"""advisor model inspect on GGUF files written here with gguf.GGUFWriter (llama.cpp's own writer):
a mixed K-quant allocation with an imatrix recorded, a legacy Q8_0 one, and damaged files (truncated,
wrong magic, counts the file cannot hold, a tensor type the reader does not know). The real files that
llama-quantize makes are read in tests/integration/test_gguf_real_files.py."""

import json

import gguf
import numpy as np
import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.models.gguf_file import GGUFError
from advisor.models.inspect import inspect

runner = CliRunner()
Q = gguf.GGMLQuantizationType
HIDDEN, FFN, VOCAB, LAYERS = 256, 512, 300, 4


def quantized(kind: Q, rows: int, cols: int) -> np.ndarray:
    """The bytes of a rows x cols tensor of a quantized type (zeros: only the header is read)."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return np.zeros((rows, cols // block * size), np.uint8)


def write(path, types: dict[str, Q], file_type=None, meta: dict | None = None):
    """A Llama-shaped GGUF: `types` gives each role's type; attn_v and ffn_down get Q6_K on the
    first half of the layers when their type is 'mixed' (what llama.cpp's Q4_K_M does)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    if file_type is not None:
        w.add_file_type(file_type)
    for k, v in (meta or {}).items():
        (w.add_string if isinstance(v, str) else w.add_uint32)(k, v)

    def add(name, kind, rows, cols):
        if kind == Q.F32:
            w.add_tensor(name, np.zeros(cols, np.float32))
        elif kind == Q.F16:
            w.add_tensor(name, np.zeros((rows, cols), np.float16))
        else:
            w.add_tensor(name, quantized(kind, rows, cols), raw_dtype=kind)

    add("token_embd.weight", types["embeddings"], VOCAB, HIDDEN)
    add("output.weight", types["output"], VOCAB, HIDDEN)
    add("output_norm.weight", Q.F32, 1, HIDDEN)
    for i in range(LAYERS):
        for role, rows, cols in (("attn_q", HIDDEN, HIDDEN), ("attn_k", 64, HIDDEN), ("attn_v", 64, HIDDEN),
                                 ("attn_output", HIDDEN, HIDDEN), ("ffn_gate", FFN, HIDDEN),
                                 ("ffn_up", FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)):
            kind = types.get(role, types["default"])
            if kind == "mixed":
                kind = Q.Q6_K if i < LAYERS // 2 else Q.Q4_K
            add(f"blk.{i}.{role}.weight", kind, rows, cols)
        add(f"blk.{i}.attn_norm.weight", Q.F32, 1, HIDDEN)
        add(f"blk.{i}.ffn_norm.weight", Q.F32, 1, HIDDEN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


Q4_K_M = {"default": Q.Q4_K, "attn_v": "mixed", "ffn_down": "mixed", "embeddings": Q.Q4_K, "output": Q.Q6_K}
IMATRIX = {"quantize.imatrix.file": "imatrix.gguf", "quantize.imatrix.dataset": "calibration.txt",
           "quantize.imatrix.entries_count": 28, "quantize.imatrix.chunks_count": 32}


def test_a_k_quant_mix_in_four_layers_with_its_imatrix(tmp_path):
    path = write(tmp_path / "tiny-Q4_K_M.gguf", Q4_K_M, gguf.LlamaFileType.MOSTLY_Q4_K_M, IMATRIX)
    r = inspect(path)
    assert r.container.startswith("GGUF v3, ") and r.files == 1
    assert r.metadata["general.file_type"] == "15 (Q4_K_M)"
    assert r.recipe.startswith("llama.cpp file type Q4_K_M: K-quant Q4_K, Q6_K (")
    assert r.recipe.endswith("quantized with an importance matrix")
    roles = {x.role: x for x in r.roles}
    assert roles["attn_v"].formats == {"Q6_K": 2, "Q4_K": 2}
    assert roles["attn_v"].layers == {"Q6_K": "0-1", "Q4_K": "2-3"}
    assert roles["attn_q"].bpw == pytest.approx(144 * 8 / 256)  # 4.5: a Q4_K super-block is 144 bytes
    assert roles["output"].formats == {"Q6_K": 1} and roles["output"].bpw == pytest.approx(210 * 8 / 256)
    assert roles["norm"].formats == {"F32": 2 * LAYERS + 1}
    assert r.pattern == "mostly Q4_K; Q6_K on ffn_down (layers 0-1), output, attn_v (layers 0-1)"  # roles by size
    # Bits per weight from bytes: every tensor's bytes over its weights, the F32 norms included.
    assert r.bytes == sum(x.bytes for x in r.roles) and r.bpw == pytest.approx(8 * r.bytes / r.params)
    assert 4.5 < r.bpw < 6.5625
    assert r.name_bpw == 4.0  # the name says 4 bits; the bytes say more
    assert r.calibration == "present: imatrix imatrix.gguf, dataset calibration.txt, 32 chunks, 28 tensors"
    text = r.text()
    assert "the name suggests 4" in text and "Q6_K x2 (0-1), Q4_K x2 (2-3)" in text


def test_legacy_q8_0_is_uniform_and_has_no_imatrix(tmp_path):
    path = write(tmp_path / "model.gguf", {"default": Q.Q8_0, "embeddings": Q.Q8_0, "output": Q.Q8_0},
                 gguf.LlamaFileType.MOSTLY_Q8_0)
    r = inspect(path)
    assert r.recipe.startswith("llama.cpp file type Q8_0: legacy block quant Q8_0 (")
    assert "blocks of 32 weights" in r.recipe
    assert r.pattern == "uniform Q8_0 (norms kept apart)"
    assert r.name_bpw == 8.0  # from the file type, as the file's name says nothing
    assert r.calibration == "no imatrix recorded (no quantize.imatrix.* keys)"
    assert {x.role: x.bpw for x in r.roles}["ffn_up"] == pytest.approx(34 * 8 / 32)


def test_a_folder_with_one_gguf_file_is_read(tmp_path):
    write(tmp_path / "only.gguf", {"default": Q.F16, "embeddings": Q.F16, "output": Q.F16})
    r = inspect(tmp_path)
    assert r.path.endswith("only.gguf") and r.pattern == "uniform F16 (norms kept apart)"
    assert r.recipe == "none: unquantized F16 (no file type recorded)"


def _damaged(tmp_path, how: str):
    path = write(tmp_path / "m.gguf", Q4_K_M, gguf.LlamaFileType.MOSTLY_Q4_K_M)
    raw = bytearray(path.read_bytes())
    if how == "truncated":
        raw = raw[: len(raw) - 1000]
    elif how == "magic":
        raw[:4] = b"GGML"
    elif how == "counts":
        raw[8:16] = (2**40).to_bytes(8, "little")  # tensor count
    elif how == "type":
        # The last tensor's info ends with its type (uint32) and offset (uint64): set the type to 99.
        name = b"blk.3.ffn_norm.weight"
        at = raw.index(name) + len(name) + 4 + 8  # n_dims, then one dim
        raw[at: at + 4] = (99).to_bytes(4, "little")
    elif how == "short":
        raw = raw[:10]
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("how, message", [
    ("truncated", "truncated, or a header that lies"),
    ("magic", "not a GGUF file (magic b'GGML'"),
    ("counts", "the header claims 1099511627776 tensors"),
    ("type", "a tensor has GGML type 99, which gguf"),
    ("short", "too short for a GGUF header"),
])
def test_damaged_files_are_one_clear_line(tmp_path, how, message):
    path = _damaged(tmp_path, how)
    with pytest.raises(GGUFError, match=message.replace("(", r"\(").replace("'", "'")) as e:
        inspect(path)
    assert "\n" not in str(e.value)


def test_the_cli_reads_gguf_and_refuses_a_damaged_one_with_exit_2(tmp_path):
    path = write(tmp_path / "m-Q4_K_M.gguf", Q4_K_M, gguf.LlamaFileType.MOSTLY_Q4_K_M, IMATRIX)
    r = runner.invoke(app, ["model", "inspect", str(path), "-o", "json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["container"].startswith("GGUF v3") and body["formats"]["Q6_K"] > 0
    r = runner.invoke(app, ["model", "inspect", str(_damaged(tmp_path, "type"))])
    assert r.exit_code == 2 and "GGML type 99" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_two_gguf_files_in_a_folder_must_be_named(tmp_path):
    for n in ("a.gguf", "b.gguf"):
        write(tmp_path / n, {"default": Q.F16, "embeddings": Q.F16, "output": Q.F16})
    r = runner.invoke(app, ["model", "inspect", str(tmp_path)])
    assert r.exit_code == 2 and "2 GGUF files (a.gguf, b.gguf); name the one to inspect" in r.stderr


class _Engine:
    """A stand-in for an engine's model endpoints on 127.0.0.1: /v1/models without a root (as
    llama.cpp's) and /props with the model_path."""

    def __init__(self, model_path: str):
        import http.server
        import threading

        body = json.dumps({"model_path": model_path}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/props":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_the_served_model_from_an_engine_url_or_a_deployment_spec(tmp_path):
    path = write(tmp_path / "served-Q4_K_M.gguf", Q4_K_M, gguf.LlamaFileType.MOSTLY_Q4_K_M)
    direct = json.loads(runner.invoke(app, ["model", "inspect", str(path), "-o", "json"]).stdout)
    engine = _Engine(str(path))
    try:
        r = runner.invoke(app, ["model", "inspect", "--url", engine.url, "-o", "json"])
    finally:
        engine.close()
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == direct
    spec = tmp_path / "dep.yaml"
    spec.write_text(json.dumps({"name": "d", "engine": "llamacpp", "model": "tiny", "launcher": "local",
                                "local": {"command": ["llama-server", "-m", str(path)], "port": 8080}}))
    r = runner.invoke(app, ["model", "inspect", "--deployment", str(spec), "-o", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == direct


def test_inspect_needs_exactly_one_source_and_a_local_model(tmp_path):
    r = runner.invoke(app, ["model", "inspect"])
    assert r.exit_code == 2 and "give one of PATH, --url or --deployment" in r.stderr
    engine = _Engine("/nowhere/model.gguf")
    try:
        r = runner.invoke(app, ["model", "inspect", "--url", engine.url])
    finally:
        engine.close()
    assert r.exit_code == 2 and "names the model '/nowhere/model.gguf', which is not a file" in r.stderr
