"""torch's OpInfo database against braze, bfloat16: every op through torch.export, the braze
reference and the native backend, compared with eager (rules: opinfo_sweep.py; counts:
scripts/opinfo_report.py)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

from opinfo_cases import make  # noqa: E402

options, test_opinfo, test_opinfo_all_samples = make("bfloat16", share=(0, 2))  # half the ops each by default; all under -m slow
