"""The README's worked example quotes the model's figures: this test re-runs the example and reads the README, so
a change of the model that moves them fails here until the README says the new figures."""

from __future__ import annotations

from pathlib import Path

from deepstack import api

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_worked_example_figures_are_the_models():
    report = api.evaluate(model="deepseek-v3", chip="standard", noc="tms1", phase="decode", batch=1024,
                          with_ttft=False, breakdown=False)
    m = report.metrics
    quoted = (f"here `{report.schedule.text}`: {round(m.stps, -2):,.0f} tokens/s, {m.utps:.1f} tokens/s per user,\n"
              f"{m.tokens_per_joule:.2f} tokens/J, {m.temperature_c:.1f} °C at {m.power_density_W_per_mm2:.2f} W/mm²")
    assert quoted in README, quoted
