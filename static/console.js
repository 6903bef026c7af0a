// uagate console: shows the times the server writes in UTC (<time datetime="…Z">) in the
// browser's time zone (data-precision="minute": without seconds; "clock": the time of day only
// when it is today), keeping UTC in their title, and names that zone (.tz-name). Forms marked
// data-local-times send the zone offset of their datetime-local inputs as `tz`. Without
// JavaScript the pages read in UTC.
(function () {
  "use strict";
  function pad(n) {
    return String(n).padStart(2, "0");
  }
  function local(d, seconds) {
    var s = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
    return seconds ? s + ":" + pad(d.getSeconds()) : s;
  }
  function zone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    } catch (e) {
      return "local time";
    }
  }
  // A time of day ("10:42") when it is today, else with its date.
  function clock(d) {
    var now = new Date();
    var today = d.getFullYear() === now.getFullYear() && d.getMonth() === now.getMonth() &&
      d.getDate() === now.getDate();
    return today ? pad(d.getHours()) + ":" + pad(d.getMinutes()) : local(d, false);
  }
  function rewrite(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      var precision = t.getAttribute("data-precision");
      t.textContent = precision === "clock" ? clock(d) : local(d, precision !== "minute");
    });
    root.querySelectorAll(".tz-name").forEach(function (s) {
      s.textContent = zone();
    });
  }
  // The offset at the first time entered (a range across a DST change is off by that hour at
  // its other end), else now.
  function sendZone(form) {
    form.addEventListener("submit", function () {
      var tz = form.querySelector("input[name=tz]");
      if (!tz) return;
      var at = new Date();
      var inputs = form.querySelectorAll("input[type=datetime-local]");
      for (var i = 0; i < inputs.length; i++) {
        var d = new Date(inputs[i].value);
        if (inputs[i].value && !isNaN(d.getTime())) {
          at = d;
          break;
        }
      }
      tz.value = String(-at.getTimezoneOffset());
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    rewrite(document);
    document.querySelectorAll("form[data-local-times]").forEach(sendZone);
    // On a phone the navigation is one line that scrolls sideways: the page open is shown in it.
    var here = document.querySelector('header.top nav a[aria-current="page"]');
    var nav = here && here.parentElement;
    if (nav && nav.scrollWidth > nav.clientWidth) {
      nav.scrollLeft = here.offsetLeft - (nav.clientWidth - here.offsetWidth) / 2;
    }
    // Maintenance: the picker's time is the browser's local time: send its offset from UTC
    // (without JavaScript the time is taken as UTC).
    var maintenance = document.getElementById("maintenance-form");
    if (maintenance) {
      maintenance.addEventListener("submit", function () {
        var v = document.getElementById("maintenance-return").value;
        document.getElementById("maintenance-tz").value =
          String((v ? new Date(v) : new Date()).getTimezoneOffset());
      });
    }
  });
  // Forms that ask before they submit (the console has no inline script: the page's
  // Content-Security-Policy forbids it). Listened for on the document, so that forms in parts
  // htmx refreshes (the field connections' Force failover) ask too.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-confirm")) return;
    if (!window.confirm(form.getAttribute("data-confirm"))) e.preventDefault();
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    rewrite(e.target);
    limitsHints();
  });
  // Limits page: the plan preview's error goes next to the input it names, the placeholders
  // follow the capacity as typed, and the notice of the last change goes once the form changes.
  function limitsHints() {
    var form = document.getElementById("limits-form");
    if (!form) return;
    form.querySelectorAll(".field-error.plan").forEach(function (s) { s.remove(); });
    form.querySelectorAll("[aria-invalid]").forEach(function (i) { i.removeAttribute("aria-invalid"); });
    var error = document.getElementById("plan-error");
    var at = error && error.getAttribute("data-input");
    var input = at && form.querySelector('[name="' + at.replace(/"/g, "") + '"]');
    if (input) {
      var span = document.createElement("span");
      span.className = "field-error plan";
      span.setAttribute("role", "alert");
      span.textContent = error.textContent;
      input.setAttribute("aria-invalid", "true");
      input.insertAdjacentElement("afterend", span);
    }
    var hints = document.getElementById("plan-hints");
    var raw = hints && hints.getAttribute("data-placeholders");
    if (raw) {
      try {
        var map = JSON.parse(raw);
        Object.keys(map).forEach(function (name) {
          var i = form.querySelector('[name="' + name + '"]');
          if (i) i.setAttribute("placeholder", map[name]);
        });
      } catch (err) { /* no hints */ }
    }
  }
  // Copy buttons (data-copy names the element whose text they copy): shown only with
  // JavaScript; the text itself is selectable with one click without it.
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      if (navigator.clipboard) b.hidden = false;
    });
  });
  document.addEventListener("click", function (e) {
    var b = e.target && e.target.closest && e.target.closest("button[data-copy]");
    if (!b) return;
    var source = document.getElementById(b.getAttribute("data-copy"));
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      b.textContent = "Copied";
      setTimeout(function () { b.textContent = "Copy"; }, 2000);
    });
  });
  document.addEventListener("input", function (e) {
    if (e.target && e.target.closest && e.target.closest("#limits-form")) {
      var n = document.getElementById("notice");
      if (n) n.remove();
    }
  });
})();
