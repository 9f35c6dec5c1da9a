// Keyboard shortcuts of the Annotate tab. Active only while that tab is visible and the focus is
// not in a text field (Esc leaves a text field). 1/2/3 label, e cycles the error kind,
// a/b/= preference (left / right / same), s skip, Enter save.
(() => {
  const LABELS = { "1": "correct", "2": "partly_correct", "3": "wrong" };
  const ERROR_KINDS = ["none", "span_selection", "generated_content", "format"];
  const PREFERENCES = { a: "left", b: "right", "=": "same" };

  const visible = (element) => element !== null && element.offsetParent !== null;
  const isTextField = (element) =>
    element !== null &&
    (element.tagName === "TEXTAREA" ||
      element.isContentEditable ||
      (element.tagName === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(element.type)));

  // Gradio renders a Radio choice as <label><input type="radio" value="..."> ...</label>.
  const choose = (radioId, value) => {
    const group = document.getElementById(radioId);
    if (!visible(group)) return false;
    const input = group.querySelector(`input[type="radio"][value="${CSS.escape(value)}"]`);
    if (input === null) return false;
    input.click();
    return true;
  };

  const chosen = (radioId) => {
    const input = document.querySelector(`#${radioId} input[type="radio"]:checked`);
    return input === null ? null : input.value;
  };

  const press = (buttonId) => {
    const button = document.getElementById(buttonId);
    if (!visible(button)) return false;
    button.click();
    return true;
  };

  document.addEventListener("keydown", (event) => {
    const panel = document.getElementById("annotate-panel");
    if (!visible(panel) || event.ctrlKey || event.metaKey || event.altKey) return;
    if (isTextField(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    let handled = false;
    if (key in LABELS) handled = choose("ann-label", LABELS[key]);
    else if (key in PREFERENCES) handled = choose("ann-pref", PREFERENCES[key]);
    else if (key === "e") {
      const current = ERROR_KINDS.indexOf(chosen("ann-error") || "none");
      handled = choose("ann-error", ERROR_KINDS[(current + 1) % ERROR_KINDS.length]);
    } else if (key === "s") handled = press("ann-skip");
    else if (key === "Enter" && event.target.tagName !== "BUTTON") handled = press("ann-save");
    if (handled) event.preventDefault();
  });
})();
