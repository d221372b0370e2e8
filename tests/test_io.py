import os

import pytest

from oodcalc.io import write_text_atomic


def test_new_file_gets_the_usual_mode_and_existing_file_keeps_its_own(tmp_path):
    umask = os.umask(0o022)
    try:
        fresh = write_text_atomic(tmp_path / "new.txt", "a")
        assert fresh.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o600)
        write_text_atomic(kept, "new")
        assert kept.read_text() == "new" and kept.stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(umask)


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    from oodcalc.io import write_atomic
    target = tmp_path / "data.csv"
    target.write_text("precious")

    def explode(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(target, explode)
    assert target.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir()] == ["data.csv"]
