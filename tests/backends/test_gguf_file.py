"""The GGUF tensor index reader gives what gguf.GGUFReader gives, without parsing the metadata (ungraded)."""

import gguf
import numpy as np
import pytest

from miniyaie.backends.gguf_file import read_tensors

pytestmark = pytest.mark.ungraded
Q = gguf.GGMLQuantizationType


def write(path, alignment=None):
    writer = gguf.GGUFWriter(str(path), "qwen2")
    if alignment:
        writer.add_uint32("general.alignment", alignment)
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_array("tokenizer.ggml.tokens", ["a", "é", "", "tok" * 40])  # strings of several lengths, one not ASCII
    writer.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0, 0.0])
    writer.add_array("nested", [[1, 2], [3]])
    writer.add_bool("flag", True)
    writer.add_float64("f64", 1.5)
    writer.add_int64("i64", -7)
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.standard_normal((3, 64)).astype(np.float32))
    writer.add_tensor("f16", rng.standard_normal((2, 32)).astype(np.float16))
    for kind in (Q.Q4_1, Q.Q8_0, Q.Q4_0):
        writer.add_tensor(kind.name.lower(), gguf.quants.quantize(rng.standard_normal((4, 96)).astype(np.float32), kind),
                          raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_tensor_is_what_ggufreader_gives(tmp_path, alignment):
    path = tmp_path / "model.gguf"
    write(path, alignment)
    architecture, tensors = read_tensors(path)
    reader = gguf.GGUFReader(str(path))
    assert architecture == "qwen2"
    assert list(tensors) == [t.name for t in reader.tensors]
    for t in reader.tensors:
        kind, data, shape = tensors[t.name]
        expected = np.asarray(t.data)
        assert kind == t.tensor_type.name and shape == tuple(int(s) for s in reversed(t.shape.tolist())), t.name
        assert data.dtype == expected.dtype and data.shape == expected.shape, t.name
        assert np.array_equal(data.view(np.uint8), expected.view(np.uint8)), t.name


def test_a_file_that_is_not_gguf_is_refused_in_one_line(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGML" + bytes(40))
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_tensors(path)
