"""The paper's toy example (Sec. II, Fig. 2): a 2-D embedding of a few identities on the unit circle.

With C classes the ideal layout spaces the class centres 360°/C apart (45° for 8 identities) and keeps each
class tight around its centre. `callbacks/toy_2d.py` measures a run at the end of training; the command
`elasticface-toy-2d` (`cli/toy_2d.py`) and `notebooks/toy_2d.ipynb` summarise a sweep over heads and seeds.
One module per concern:

- `geometry`: the angles between consecutive centres and each class's angular spread;
- `results`: the files a run writes, and the runs of a sweep read back;
- `figures`: the paper's picture of one run, and runs side by side;
- `summary`: per head over seeds, the gap criterion, merged centres and mean ± std, as a Markdown table.
"""
