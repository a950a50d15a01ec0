"""Frame conversion (pure): list layouts, tensors, casts, images, nulls — and the reference's cast rules."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.arrow_compare import rows, schema_signature
from tests.helpers import OracleError, read_part, run_import, run_oracle
from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.lerobot.info import Feature
from transforms.base.errors import LeRobotImportError
from transforms.episode.frames import convert_column, index_layout


def feature(dtype="float32", shape=(2, 3), names=None, name="f") -> Feature:
    return Feature(name=name, dtype=dtype, shape=tuple(shape), names=names, info={})


MATRIX = [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]


@pytest.mark.parametrize("layout", ["fixed/fixed", "list/list", "fixed/list", "list/fixed"])
def test_nested_list_layouts_read_the_same(layout):
    outer, inner = layout.split("/")
    inner_t = pa.list_(pa.float32(), 3) if inner == "fixed" else pa.list_(pa.float32())
    outer_t = pa.list_(inner_t, 2) if outer == "fixed" else pa.list_(inner_t)
    out = convert_column(pa.array(MATRIX, outer_t), feature(names=["rows", "cols"]))
    assert out.type.extension_name == "arrow.fixed_shape_tensor"
    assert out.type.shape == [2, 3] and out.type.dim_names == ["rows", "cols"]
    assert out.storage.to_pylist() == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]
    np.testing.assert_array_equal(out.to_numpy_ndarray(), np.array(MATRIX, np.float32))


def test_flat_list_for_a_matrix_fails():
    flat = pa.array([[1, 2, 3, 4, 5, 6]], pa.list_(pa.float32(), 6))
    with pytest.raises(LeRobotImportError) as err:
        convert_column(flat, feature())
    assert err.value.rule == "column_type"
    assert "flat list cannot hold a multi-dimensional tensor" in str(err.value)


def test_wrong_length_names_the_row():
    col = pa.array([[1.0, 2.0, 3.0], [1.0, 2.0]], pa.list_(pa.float32()))
    with pytest.raises(LeRobotImportError) as err:
        convert_column(col, feature(shape=(3,)))
    assert "value at index 1 (level 1) has length 2, expected 3" in str(err.value)


def test_fixed_size_of_wrong_width_fails():
    with pytest.raises(LeRobotImportError, match="hold 4 values, expected 3"):
        convert_column(pa.array([[1, 2, 3, 4]], pa.list_(pa.float32(), 4)), feature(shape=(3,)))


def test_null_frame_is_null_tensor_and_null_inside_fails():
    col = pa.array([[1.0, 2.0], None, [5.0, 6.0]], pa.list_(pa.float32()))
    out = convert_column(col, feature(shape=(2,)))
    assert out.storage.to_pylist() == [[1.0, 2.0], None, [5.0, 6.0]]
    with pytest.raises(LeRobotImportError, match="holds a null value"):
        convert_column(pa.array([[1.0, None]], pa.list_(pa.float32())), feature(shape=(2,)))


def test_casts_follow_the_reference():
    assert convert_column(pa.array([1.5, -1.7, None]), feature("int64", (1,))).to_pylist() == [1, -1, None]
    assert convert_column(pa.array([16777217]), feature("float32", (1,))).to_pylist() == [16777216.0]
    assert convert_column(pa.array([0.1]), feature("float32", (1,))).to_pylist() == [np.float32(0.1).item()]
    for bad, dtype in ((pa.array([1000]), "int8"), (pa.array([float("nan")]), "int64"),
                       (pa.array([1e30]), "int64"), (pa.array([-1]), "uint8")):
        with pytest.raises(LeRobotImportError) as err:
            convert_column(bad, feature(dtype, (1,)))
        assert err.value.rule == "column_type" and dtype in str(err.value)


def test_strings_bools_and_one_element_lists():
    assert convert_column(pa.array([b"ab", None], pa.binary()), feature("string", (1,))).to_pylist() == ["ab", None]
    assert convert_column(pa.array([1, 0]), feature("bool", (1,))).to_pylist() == [True, False]
    one = pa.array([[1.0], None, [3.0]], pa.list_(pa.float32(), 1))
    assert convert_column(one, feature("float32", (1,))).to_pylist() == [1.0, None, 3.0]
    with pytest.raises(LeRobotImportError):
        convert_column(pa.array([b"\xff"], pa.binary()), feature("string", (1,)))


def test_images_become_encoded_images_with_named_sizes():
    col = pa.array([{"bytes": b"png0", "path": "a.png"}, {"bytes": None, "path": "b.png"}, None],
                   pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    out = convert_column(col, feature("image", (90, 160, 3), ["height", "width", "channels"]))
    assert out.type.extension_name == "spql.EncodedImage"
    values = out.storage.to_pylist()
    assert values[1] is None and values[2] is None
    assert values[0]["width"] == 160 and values[0]["height"] == 90 and values[0]["format"] is None
    assert values[0]["source"]["bytes"] == b"png0" and values[0]["source"]["uri"] is None
    unnamed = convert_column(col, feature("image", (90, 160, 3), None)).storage.to_pylist()[0]
    assert unnamed["width"] is None and unnamed["height"] is None
    with pytest.raises(LeRobotImportError) as err:
        convert_column(pa.array([[1, 2]], pa.list_(pa.uint8())), feature("image", (1, 2, 1)))
    assert err.value.rule == "image_column"


def test_dimension_names_rule():
    assert feature(shape=(2, 3), names=["rows", "cols"]).dim_names == ["rows", "cols"]
    assert feature(shape=(2, 3), names={"finger": ["l", "r"], "axis": ["x", "y", "z"]}).dim_names == ["finger", "axis"]
    assert feature(shape=(2,), names=["x", "y"]).dim_names is None
    assert feature(shape=(3,), names=None).dim_names is None


def test_index_layout():
    assert index_layout(pa.array([10, 11, 12]), file="d").first_index == 10
    with pytest.raises(LeRobotImportError, match="row 2 holds 13 after 11"):
        index_layout(pa.array([10, 11, 13]), file="d")


def _set(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, array)


# Data files whose columns differ from the declared type in ways the reference accepts.
CAST_CASES = {
    "float64_declared_float32": ("float32", [2], lambda n: pa.array([[0.1, 0.2]] * n, pa.list_(pa.float64()))),
    "float_with_fraction_declared_int64": ("int64", [1], lambda n: pa.array(np.arange(n) + 0.5)),
    "int64_declared_float32": ("float32", [1], lambda n: pa.array(np.arange(n) + 16777215)),
    "null_scalars": ("float32", [1], lambda n: pa.array([None if i % 2 else float(i) for i in range(n)], pa.float32())),
    "binary_declared_string": ("string", [1], lambda n: pa.array([f"s{i}".encode() for i in range(n)], pa.binary())),
}


@pytest.mark.parametrize("case", sorted(CAST_CASES))
def test_cast_conformance_with_reference(case, tmp_path, oracle_dir):
    dtype, shape, make = CAST_CASES[case]
    spec = DatasetSpec(lengths=(3, 2), features={"v": {"dtype": dtype, "shape": shape, "names": None}})
    root = write_dataset(tmp_path / "ds", spec, mutate_data=lambda t, n: _set(t, "v", make(t.num_rows)))
    try:
        reference = run_oracle(root, "meta/episodes/chunk-000/file-000.parquet", oracle_dir)
    except OracleError as ex:
        pytest.fail(f"the reference rejected {case}: {ex}")
    out = tmp_path / "out"
    assert run_import(root, out, "--one-part") == 0
    ours = read_part(out)
    assert schema_signature(ours.schema) == schema_signature(reference.schema)
    assert rows(ours) == rows(reference)
