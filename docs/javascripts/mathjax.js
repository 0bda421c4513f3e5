// MathJax for the equations (pymdownx.arithmatex, generic mode), re-typeset on every page change.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
document$.subscribe(() => {
  if (window.MathJax.typesetPromise) {
    MathJax.typesetPromise();
  }
});
