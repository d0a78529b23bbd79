"""PP-Chart2Table (model_type pp_chart2table): GOT-OCR 2.0's model under its own configs and processor.

transformers has no modeling file for it: ``PPChart2TableConfig`` maps to
``GotOcr2ForConditionalGeneration``, so the tower, projector, host, grids and
every value are GOT-OCR 2.0's (`envoys.families.got_ocr2`), and so are the rules
(the host's scatter rule is ``got_ocr2.image-scatter``). What differs is the
processor: ``PPChart2TableProcessor`` expands no placeholder, so the prompt
(its chat template) holds every image token itself, and it refuses a call
without images.
"""

from __future__ import annotations

from . import Family
from .got_ocr2 import ENVOYS, RENAME, GotOcr2Grids

FAMILY = Family("pp_chart2table", RENAME, ENVOYS, "model.language_model.layers", grid_layout=GotOcr2Grids())
