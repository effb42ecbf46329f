/* Browser-style code: prototypes, closures, regexes and ASI. */
var Widgets = (function () {
  var registry = {}
  var counter = 0

  function Widget(name, options) {
    if (!(this instanceof Widget)) return new Widget(name, options)
    this.name = name
    this.options = options || {}
    this.id = 'w' + (++counter)
  }

  Widget.prototype.render = function (root) {
    var html = '<div class="widget" id="' + this.id + '">' + escape(this.name) + '</div>'
    root.innerHTML += html
    return this
  }

  Widget.prototype.toString = function () {
    return '[Widget ' + this.name + ']'
  }

  function escape(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]
    })
  }

  function isEmail(s) {
    return /^[^\s@]+@[^\s@]+\.[a-z]{2,}$/i.test(s)
  }

  var ratio = 10 / 2 / 5, half = counter / 2
  var matches = 'a/b/c'.split(/\//)

  label: for (var i = 0; i < 3; i++) {
    for (var j = 0; j < 3; j++) {
      if (j === 1) continue label
      if (i === 2) break label
    }
  }

  switch (typeof ratio) {
    case 'number':
      ratio = ratio | 0
      break
    default:
      ratio = NaN
  }

  do counter--
  while (counter > 10)

  return {
    create: function (name, options) {
      var w = Widget(name, options)
      registry[w.id] = w
      return w
    },
    get: function (id) { return registry[id] },
    isEmail: isEmail,
    stats: { ratio: ratio, half: half, parts: matches.length },
    'delete': function (id) { delete registry[id] },
  }
})()

if (typeof module !== 'undefined' && module.exports) module.exports = Widgets
