"""The live timeline: a widget under the cell that asks the kernel for each view it shows.

:mod:`.lod` is the level-of-detail index (pure numpy/pandas); :mod:`.widget` the anywidget
class and its ES module; :mod:`.frontend` decides between the widget and the static figure;
:mod:`.bundle` puts the widget into a report's MIME bundle."""
