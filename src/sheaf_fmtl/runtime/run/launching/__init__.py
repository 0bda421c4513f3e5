"""Starting a run: the one launcher every command and the Python API go through (:mod:`.launch`),
the checks made before any rank starts (:mod:`.precheck`), one rank of a process group
(:mod:`.rank`, :mod:`.rankenv`), ``processes = K`` on this machine (:mod:`.spawn`), and continuing
a stopped run (:mod:`.resume`)."""
