// %npuadvise's findings with a "timeline" button on each finding's row: a click asks the kernel,
// which moves the run's live view to the finding (or opens one under the advice) and answers
// what it shows, or why it cannot. The HTML is the advice's static output, built (and escaped)
// in the kernel; the table's body rows are its findings, in order.

export default {
  render({model, el}) {
    const root = document.createElement("div");
    root.className = "npumagic-advice";
    root.innerHTML = model.get("html");
    const status = document.createElement("div");
    status.className = "npumagic-advice-status";
    status.style.cssText = "color:#555;margin:4px 0;white-space:pre-wrap";
    const findings = model.get("findings");
    let seq = 0;
    root.querySelectorAll("table tbody tr").forEach((row, k) => {
      if (k >= findings.length || !row.cells.length) return;
      const button = document.createElement("button");
      button.className = "npumagic-show-finding";
      button.textContent = "→ timeline";
      button.title = "show this finding on the run's live timeline";
      button.style.cssText = "display:block;font:11px sans-serif;padding:0 4px;margin-top:2px;cursor:pointer";
      button.dataset.index = k; button.dataset.rule = findings[k].rule; button.dataset.ranks = findings[k].ranks.join(",");
      button.addEventListener("click", () => {
        seq += 1; root.dataset.asked = seq;
        status.textContent = `opening "${findings[k].title}" on the timeline…`;
        model.set("pick", {index: k, seq}); model.save_changes();
      });
      row.cells[0].append(button);
    });
    model.on("change:picked", () => {
      const p = model.get("picked");
      status.textContent = p.error ? `cannot show it on the timeline: ${p.error}` : `timeline: ${p.shown}`;
      root.dataset.shown = p.error ? "" : p.shown; root.dataset.answered = p.seq ?? -1;
    });
    root.append(status);
    el.appendChild(root);
  },
};
