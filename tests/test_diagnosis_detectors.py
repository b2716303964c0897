"""Every detector the runner calls names the pattern it looks for: the progress bar says "looking for
<pattern>" and a detector's error is reported under it, so a detector without one breaks the Diagnosis
page's progress (seen once: a new detector module without PATTERN)."""

from tailscope.analysis.diagnosis import runner


def test_every_detector_names_its_pattern() -> None:
    for detector in runner.DETECTORS:
        assert isinstance(getattr(detector, "PATTERN", None), str), detector.__name__
        assert callable(detector.detect), detector.__name__
