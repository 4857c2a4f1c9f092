"""Identification: MegaFace and MegaFace (R) on insightface's testpack, IJB-B/C 1:N and TinyFace, on one set of
primitives.

MegaFace: `testpack` (the layout, its names said once, and its lists read as data), `devkit_lists` (the devkit's
template lists), `devkit_files` (gen_megaface.py's feature files, read and written), `refine` ((R): the noise lists
applied), `images` (the images embedded a piece at a time), `planning` (the scans that give every distractor
count), `distractor_search` (the devkit's rule, scanned in chunks), `scoring` (both views scored), `megaface` (the
run, its settings from configs/eval.yaml alone), `megaface_report` (eval.py's `megaface` node: tables, rows,
figure), `stand_in` (a testpack from any folder of aligned faces). IJB 1:N: `gallery_search` (the rule), `ijb_1n`
(the lists joined to the templates of `eval.ijb`), `ijb_report` (eval.py's `ijb` node). TinyFace: `tinyface` (the
release's layout, AdaFace's closed-set rule), `tinyface_report` (eval.py's `tinyface` node), `tinyface_stand_in` (its
layout from any folder of aligned faces). Shared: `lists` (the line readers), `top_scores` (the streaming top-k),
`tables` (the console's table layout), `images`, `metrics.roc.far_key` (the FAR and FPIR key format),
`data.folder.ImageFiles` (the image dataset).
"""
