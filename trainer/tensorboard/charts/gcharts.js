// A local stand-in for the part of Google Charts (google.charts, google.visualization) that torch-tb-profiler
// 0.4.3's page calls, so that its views draw without the internet. Served by stepscope
// (tensorboard/profiler_tab.py) at /data/plugin/pytorch_profiler/offline/gcharts.js, after vendor/echarts.min.js.
//
// What the page's bundle uses, and so what is here:
//   google.charts.load(version, {packages}) -> a resolved promise; google.charts.setOnLoadCallback(fn)
//   new DataTable(): addColumn({type, label, id, role, p}), addRow, addRows, setProperty(row, col, name, value)
//   arrayToDataTable(rows)                       (first row: the column labels)
//   events.addListener(chart, 'select' | 'ready' | 'onmouseover' | 'onmouseout', fn)
//   chart.draw(data, options), clearChart(), getSelection(), setSelection(),
//   getChartLayoutInterface().getChartAreaBoundingBox() / getHAxisValue(px)    (the Memory view's zoom)
//   PieChart          pieHole, sliceVisibilityThreshold, legend 'none', colors, title, tooltip.text
//   ColumnChart       isStacked, legend.position, vAxis.title, colors, title
//   SteppedAreaChart  isStacked, connectSteps, areaOpacity, hAxis/vAxis titles, HTML tooltip columns
//   LineChart         hAxis/vAxis titles, explorer (drag to zoom the time axis)
//   ComboChart        seriesType, series[i].type / targetAxisIndex, vAxes[i].maxValue
//   Table             page, pageSize, sortColumn, sortAscending, allowHtml, cell property 'style'
//   Timeline          rows (row label, bar label, tooltip, start, end), timeline.showRowLabels
// Charts are drawn with Apache ECharts (SVG), in Google Charts' colours and fonts; Table is an HTML table.
// A chart type or option this file does not know, or a draw that throws, is said in words in the chart's
// box and in the page's banner (guard.js), never left blank or spinning.
(function () {
  'use strict';

  var PALETTE = ['#3366cc', '#dc3912', '#ff9900', '#109618', '#990099', '#0099c6', '#dd4477', '#66aa00',
    '#b82e2e', '#316395', '#994499', '#22aa99', '#aaaa11', '#6633cc', '#e67300', '#8b0707', '#651067',
    '#329262', '#5574a6', '#3b3eac'];
  var FONT = 'Arial, sans-serif';
  var TEXT = '#222';
  var AXIS = '#333';
  var GRID = '#ccc';

  function report(text) {
    if (window.__stepscopeReport) window.__stepscopeReport(text);
    if (window.console) console.error('[stepscope offline charts] ' + text);
  }

  // ---- values and formatting ------------------------------------------------------------------------------

  function isCell(c) { return c !== null && typeof c === 'object' && !(c instanceof Date) && 'v' in c; }
  function valueOf(c) { return isCell(c) ? c.v : c; }
  function formatNumber(v) {
    // Google's default number pattern: #,##0.###
    return Number(v).toLocaleString('en-US', {maximumFractionDigits: 3});
  }
  function textOf(c, type) {
    if (isCell(c) && c.f !== undefined && c.f !== null) return String(c.f);
    var v = valueOf(c);
    if (v === null || v === undefined) return '';
    if (typeof v === 'number' && type !== 'string') return formatNumber(v);
    return String(v);
  }
  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (ch) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[ch];
    });
  }

  // ---- DataTable --------------------------------------------------------------------------------------------

  function DataTable() {
    this.cols = [];
    this.rows = [];
  }
  DataTable.prototype.addColumn = function (spec, label, id) {
    if (typeof spec === 'string') spec = {type: spec, label: label, id: id};
    this.cols.push({type: spec.type || 'string', label: spec.label !== undefined && spec.label !== null ? String(spec.label) : (spec.id || ''),
      id: spec.id, role: spec.role, p: spec.p || {}});
    this.rows.forEach(function (r) { r.c.push(null); });
    return this.cols.length - 1;
  };
  DataTable.prototype.addRow = function (row) {
    var c = (row || []).slice(0, this.cols.length);
    while (c.length < this.cols.length) c.push(null);
    this.rows.push({c: c, p: {}, cp: {}});
    return this.rows.length - 1;
  };
  DataTable.prototype.addRows = function (rows) {
    if (typeof rows === 'number') { for (var i = 0; i < rows; i++) this.addRow([]); return; }
    for (var j = 0; j < rows.length; j++) this.addRow(rows[j]);
  };
  DataTable.prototype.getNumberOfColumns = function () { return this.cols.length; };
  DataTable.prototype.getNumberOfRows = function () { return this.rows.length; };
  DataTable.prototype.getValue = function (r, c) { return valueOf(this.rows[r].c[c]); };
  DataTable.prototype.getFormattedValue = function (r, c) { return textOf(this.rows[r].c[c], this.cols[c].type); };
  DataTable.prototype.getColumnLabel = function (c) { return this.cols[c].label; };
  DataTable.prototype.getColumnType = function (c) { return this.cols[c].type; };
  DataTable.prototype.getColumnRole = function (c) { return this.cols[c].role || ''; };
  DataTable.prototype.getColumnProperty = function (c, name) { return this.cols[c].p[name]; };
  DataTable.prototype.setValue = function (r, c, v) { this.rows[r].c[c] = v; };
  DataTable.prototype.setProperty = function (r, c, name, value) { this.rows[r].cp[c + ':' + name] = value; };
  DataTable.prototype.getProperty = function (r, c, name) { return this.rows[r].cp[c + ':' + name]; };

  function arrayToDataTable(array, firstRowIsData) {
    var dt = new DataTable();
    if (!array || !array.length) return dt;
    var header = firstRowIsData ? null : array[0];
    var data = firstRowIsData ? array : array.slice(1);
    var width = (header || data[0] || []).length;
    for (var c = 0; c < width; c++) {
      var h = header ? header[c] : '';
      if (h !== null && typeof h === 'object') { dt.addColumn(h); continue; }
      var sample = null;
      for (var r = 0; r < data.length && sample === null; r++) sample = valueOf(data[r][c]);
      dt.addColumn({type: typeof sample === 'number' ? 'number' : typeof sample === 'boolean' ? 'boolean' : 'string',
        label: h === null || h === undefined ? '' : String(h)});
    }
    dt.addRows(data);
    return dt;
  }

  // The domain column (the first) and one series per data column, with the role columns that follow it.
  function seriesOf(dt) {
    var series = [];
    for (var c = 1; c < dt.cols.length; c++) {
      var col = dt.cols[c];
      if (col.role) {
        var last = series[series.length - 1];
        if (last && col.role === 'tooltip') last.tooltipCol = c;
        continue;
      }
      series.push({col: c, label: col.label});
    }
    return series;
  }

  // ---- events -----------------------------------------------------------------------------------------------

  var events = {
    addListener: function (chart, name, fn) {
      var handle = {chart: chart, name: name, fn: fn};
      (chart.__listeners[name] = chart.__listeners[name] || []).push(handle);
      return handle;
    },
    addOneTimeListener: function (chart, name, fn) {
      var handle = events.addListener(chart, name, function (e) { events.removeListener(handle); fn(e); });
      return handle;
    },
    removeListener: function (handle) {
      var list = handle && handle.chart.__listeners[handle.name];
      if (list) list.splice(list.indexOf(handle), 1);
    },
    removeAllListeners: function (chart) { chart.__listeners = {}; },
    trigger: function (chart, name, arg) {
      (chart.__listeners[name] || []).slice().forEach(function (h) {
        try { h.fn(arg); } catch (e) { report('a ' + name + ' handler failed: ' + (e && e.message || e)); }
      });
    }
  };

  // ---- charts -----------------------------------------------------------------------------------------------

  function showFailure(container, text) {
    if (!container) return;
    container.innerHTML = '';
    var box = document.createElement('div');
    box.className = 'stepscope-chart-error';
    box.setAttribute('role', 'alert');
    box.style.cssText = 'padding:12px;border:1px solid #d32f2f;background:#fdecea;color:#611a15;font:13px ' + FONT;
    box.textContent = text;
    container.appendChild(box);
  }

  function Chart(kind, container) {
    this.kind = kind;
    this.container = container;
    this.__listeners = {};
    this.selection = [];
    this.ec = null;
    if (!container) report(kind + ': no element to draw in');
  }
  Chart.prototype.draw = function (data, options) {
    var self = this;
    this.clearChart();
    this.data = data;
    this.options = options || {};
    try {
      if (!data || !data.cols) throw new Error('draw() needs a DataTable');
      this.render(data, this.options);
    } catch (e) {
      var text = this.kind + ' could not be drawn: ' + (e && e.message || e);
      showFailure(this.container, text);
      report(text);
      return;
    }
    setTimeout(function () { events.trigger(self, 'ready', {}); }, 0);
  };
  Chart.prototype.clearChart = function () {
    if (this.ec) { this.ec.dispose(); this.ec = null; }
    if (this._onResize) { window.removeEventListener('resize', this._onResize); this._onResize = null; }
    if (this.container) this.container.innerHTML = '';
  };
  Chart.prototype.getSelection = function () { return this.selection.slice(); };
  Chart.prototype.setSelection = function (selection) {
    this.selection = selection ? selection.slice() : [];
    if (!this.ec) return;
    this.ec.dispatchAction({type: 'downplay'});
    var self = this;
    this.selection.forEach(function (s) {
      if (s.row === undefined || s.row === null) return;
      var seriesIndex = self.seriesIndexOfColumn ? self.seriesIndexOfColumn(s.column) : 0;
      self.ec.dispatchAction({type: 'highlight', seriesIndex: seriesIndex, dataIndex: s.row});
    });
  };

  // The box an ECharts chart draws in: the container's width, the height the options ask for.
  Chart.prototype.mount = function (options) {
    var el = document.createElement('div');
    var height = typeof options.height === 'number' ? options.height : (this.container.clientHeight || 400);
    el.style.cssText = 'width:100%;height:' + height + 'px;position:relative';
    el.setAttribute('data-chart', this.kind);  // what the browser tests (and a reader of the DOM) look for
    this.container.appendChild(el);
    this.height = height;
    this.ec = echarts.init(el, null, {renderer: 'svg'});
    var self = this;
    this._onResize = function () { if (self.ec) self.ec.resize(); };
    window.addEventListener('resize', this._onResize);
    return this.ec;
  };

  Chart.prototype.title = function (options) {
    return options.title ? {text: options.title, left: 10, top: 4,
      textStyle: {fontFamily: FONT, fontSize: 13, fontWeight: 'bold', color: TEXT}} : undefined;
  };

  Chart.prototype.legend = function (options, fallback) {
    var pos = options.legend === 'none' ? 'none' :
      (options.legend && options.legend.position) || (typeof options.legend === 'string' ? options.legend : fallback);
    if (pos === 'none') return {show: false};
    var legend = {type: 'scroll', textStyle: {fontFamily: FONT, fontSize: 12, color: TEXT}, icon: 'rect',
      itemWidth: 12, itemHeight: 12};
    if (pos === 'bottom') { legend.bottom = 4; legend.left = 'center'; }
    else if (pos === 'top') { legend.top = options.title ? 24 : 4; legend.left = 'center'; }
    else { legend.orient = 'vertical'; legend.right = 8; legend.top = 'middle'; }
    return legend;
  };

  Chart.prototype.colors = function (options) { return options.colors && options.colors.length ? options.colors : PALETTE; };

  Chart.prototype.emitClicks = function () {
    var self = this;
    this.ec.on('click', function (p) {
      var column = self.columnOfSeries ? self.columnOfSeries(p.seriesIndex) : 1;
      self.selection = [{row: p.dataIndex, column: column}];
      events.trigger(self, 'select', {});
    });
    this.ec.on('mouseover', function (p) { events.trigger(self, 'onmouseover', {row: p.dataIndex, column: null}); });
    this.ec.on('mouseout', function (p) { events.trigger(self, 'onmouseout', {row: p.dataIndex, column: null}); });
  };

  function tooltipBox() {
    return {confine: true, backgroundColor: '#fff', borderColor: '#ccc', padding: 8,
      textStyle: {fontFamily: FONT, fontSize: 12, color: TEXT}, extraCssText: 'box-shadow:1px 1px 3px #ccc'};
  }

  function axisStyle(title) {
    return {name: title || '', nameLocation: 'middle', nameGap: 36,
      nameTextStyle: {fontFamily: FONT, fontSize: 12, fontStyle: 'italic', color: AXIS},
      axisLabel: {fontFamily: FONT, fontSize: 11, color: AXIS},
      axisLine: {lineStyle: {color: AXIS}}, splitLine: {lineStyle: {color: GRID}}};
  }

  // chartArea {left, top, width, height} in px or '%' -> ECharts grid; otherwise room for titles and legend
  function gridOf(options, hasLegendBottom) {
    var a = options.chartArea || {};
    function pct(v) { return typeof v === 'string' && /%$/.test(v) ? parseFloat(v) : null; }
    var grid = {containLabel: false, left: 80, right: 30, top: options.title ? 40 : 20, bottom: hasLegendBottom ? 70 : 50};
    if (pct(a.left) !== null) grid.left = a.left;
    if (pct(a.width) !== null && pct(a.left) !== null) grid.right = Math.max(2, 100 - pct(a.left) - pct(a.width)) + '%';
    if (pct(a.top) !== null) grid.top = a.top;
    return grid;
  }

  // ---- PieChart ---------------------------------------------------------------------------------------------

  function PieChart(container) { Chart.call(this, 'PieChart', container); }
  PieChart.prototype = Object.create(Chart.prototype);
  PieChart.prototype.render = function (dt, options) {
    var ec = this.mount(options);
    var tooltipCol = seriesOf(dt)[0] && seriesOf(dt)[0].tooltipCol;
    var total = 0;
    var data = dt.rows.map(function (r) {
      var v = Number(valueOf(r.c[1])) || 0;
      total += v;
      return {name: textOf(r.c[0], 'string'), value: v, shown: textOf(r.c[1], 'number'),
        tip: tooltipCol !== undefined ? textOf(r.c[tooltipCol], 'string') : null};
    });
    var mode = (options.tooltip && options.tooltip.text) || 'both';
    var hole = typeof options.pieHole === 'number' ? options.pieHole : 0;
    var noLegend = options.legend === 'none';
    var titled = !!options.title;
    // Google's layout: the pie on the left, the legend beside it on the right, its labels cut to fit
    var w = ec.getWidth(), h = ec.getHeight();
    var top = titled ? 28 : 8;
    var pieWidth = noLegend ? w : w * 0.5;
    var radius = Math.max(20, Math.min(pieWidth / 2 - 10, (h - top - 8) / 2));
    var legend = this.legend(options, 'right');
    if (legend.orient === 'vertical') {
      delete legend.right;
      legend.left = pieWidth + 4;
      legend.textStyle.width = Math.max(40, w - pieWidth - 30);
      legend.textStyle.overflow = 'truncate';
      legend.tooltip = {show: true};
    }
    ec.setOption({
      color: this.colors(options), animation: false, title: this.title(options),
      legend: Object.assign(legend, {data: data.map(function (d) { return d.name; })}),
      tooltip: Object.assign(tooltipBox(), {trigger: 'item', formatter: function (p) {
        var d = data[p.dataIndex];
        if (d.tip) return d.tip;
        var pct = (total ? 100 * d.value / total : 0).toFixed(1) + '%';
        var body = mode === 'value' ? d.shown : mode === 'percentage' ? pct : d.shown + ' (' + pct + ')';
        return '<b>' + escapeHtml(d.name) + '</b><br>' + escapeHtml(body);
      }}),
      series: [{type: 'pie', radius: [hole * radius, radius],
        center: [pieWidth / 2, top + (h - top) / 2], avoidLabelOverlap: true,
        minShowLabelAngle: 12, itemStyle: {borderColor: '#fff', borderWidth: 1},
        label: {position: 'inside', formatter: '{d}%', color: '#fff', fontFamily: FONT, fontSize: 11},
        labelLine: {show: false}, emphasis: {scale: true, scaleSize: 4},
        data: data.map(function (d) { return {name: d.name, value: d.value}; })}]
    });
    this.emitClicks();
  };

  // ---- charts over a category or numeric axis ---------------------------------------------------------------

  function axisData(dt) {
    var type = dt.cols[0].type;
    var numeric = type === 'number';
    return {numeric: numeric, labels: dt.rows.map(function (r) { return textOf(r.c[0], type); }),
      values: dt.rows.map(function (r) { return valueOf(r.c[0]); })};
  }

  function tooltipFor(dt, series, axis) {
    return Object.assign(tooltipBox(), {
      trigger: 'item',
      formatter: function (p) {
        var s = series[p.seriesIndex];
        if (!s) return '';
        var row = dt.rows[p.dataIndex];
        if (s.tooltipCol !== undefined && row.c[s.tooltipCol] !== null && row.c[s.tooltipCol] !== undefined) {
          var tip = textOf(row.c[s.tooltipCol], 'string');
          return dt.cols[s.tooltipCol].p && String(dt.cols[s.tooltipCol].p.html) === 'true' ? tip : escapeHtml(tip);
        }
        return '<b>' + escapeHtml(axis.labels[p.dataIndex]) + '</b><br>' + escapeHtml(s.label) + ': ' +
          escapeHtml(textOf(row.c[s.col], 'number'));
      }
    });
  }

  function XYChart(kind, container) { Chart.call(this, kind, container); }
  XYChart.prototype = Object.create(Chart.prototype);
  XYChart.prototype.columnOfSeries = function (i) { return this.series[i] ? this.series[i].col : 1; };
  XYChart.prototype.seriesIndexOfColumn = function (col) {
    for (var i = 0; i < this.series.length; i++) if (this.series[i].col === col) return i;
    return 0;
  };
  // build(dt, options, axis, series) -> the ECharts series list; drawn on one x axis and one or two y axes
  XYChart.prototype.render = function (dt, options) {
    var ec = this.mount(options);
    var axis = axisData(dt);
    var series = this.series = seriesOf(dt);
    var legend = this.legend(options, 'right');
    var bottomLegend = legend.show !== false && legend.bottom !== undefined;
    if (legend.show !== false && legend.right !== undefined) legend.right = 4;
    var grid = gridOf(options, bottomLegend);
    if (legend.show !== false && legend.orient === 'vertical' && !options.chartArea) grid.right = 160;
    var hAxis = options.hAxis || {};
    var xAxis = Object.assign(axisStyle(hAxis.title), axis.numeric ?
      {type: 'value', scale: true, splitLine: {show: false}} :
      {type: 'category', data: axis.labels, axisTick: {alignWithLabel: true}});
    var yAxes = this.yAxes(options);
    var built = this.build(dt, options, axis, series);
    var option = {color: this.colors(options), animation: false, title: this.title(options),
      legend: Object.assign(legend, {data: series.map(function (s) { return s.label; })}),
      tooltip: tooltipFor(dt, series, axis), grid: grid, xAxis: xAxis, yAxis: yAxes, series: built};
    if (this.zoom) option.dataZoom = this.zoom(options);
    ec.setOption(option);
    this.grid = grid;
    this.emitClicks();
  };
  XYChart.prototype.yAxes = function (options) {
    var vAxis = options.vAxis || {};
    return [Object.assign(axisStyle(vAxis.title), {type: vAxis.logScale ? 'log' : 'value', nameGap: 56,
      max: axisMax(vAxis.maxValue)})];
  };
  // Google's vAxis.maxValue raises the axis to at least that value, never cuts the data; one that is not a
  // finite number (the Diff view passes NaN when its header row enters its Math.max) is ignored.
  function axisMax(maxValue) {
    if (typeof maxValue !== 'number' || !isFinite(maxValue)) return null;
    return function (extent) { return Math.max(extent.max, maxValue); };
  }
  function points(dt, axis, col) {
    return dt.rows.map(function (r, i) {
      var v = valueOf(r.c[col]);
      return axis.numeric ? [axis.values[i], v] : v;
    });
  }

  function ColumnChart(container) { XYChart.call(this, 'ColumnChart', container); }
  ColumnChart.prototype = Object.create(XYChart.prototype);
  ColumnChart.prototype.build = function (dt, options, axis, series) {
    return series.map(function (s) {
      return {type: 'bar', name: s.label, stack: options.isStacked ? 'stack' : undefined, barMaxWidth: 80,
        data: points(dt, axis, s.col)};
    });
  };

  // Google's stepped area: each domain value is a flat step across its whole category. Without connectSteps
  // the steps are not joined: touching bars are exactly that.
  function SteppedAreaChart(container) { XYChart.call(this, 'SteppedAreaChart', container); }
  SteppedAreaChart.prototype = Object.create(XYChart.prototype);
  SteppedAreaChart.prototype.build = function (dt, options, axis, series) {
    var opacity = typeof options.areaOpacity === 'number' ? options.areaOpacity : 0.3;
    var connect = options.connectSteps !== false;
    return series.map(function (s) {
      if (connect) {
        return {type: 'line', name: s.label, step: 'middle', stack: options.isStacked ? 'stack' : undefined,
          symbol: 'none', areaStyle: {opacity: opacity}, lineStyle: {width: 1}, data: points(dt, axis, s.col)};
      }
      return {type: 'bar', name: s.label, stack: options.isStacked ? 'stack' : undefined, barCategoryGap: '0%',
        itemStyle: {opacity: opacity}, data: points(dt, axis, s.col)};
    });
  };

  // isStacked is not applied to lines: Google Charts stacks only areas, bars and columns.
  function LineChart(container) { XYChart.call(this, 'LineChart', container); }
  LineChart.prototype = Object.create(XYChart.prototype);
  LineChart.prototype.build = function (dt, options, axis, series) {
    return series.map(function (s) {
      return {type: 'line', name: s.label, showSymbol: false, symbolSize: 6, lineStyle: {width: 2},
        emphasis: {focus: 'none'}, data: points(dt, axis, s.col)};
    });
  };
  // explorer {axis: 'horizontal', actions: ['dragToZoom', 'rightClickToReset']}: wheel/drag zoom of the
  // x axis and a slider under it (double-click resets)
  LineChart.prototype.zoom = function (options) {
    if (!options.explorer) return undefined;
    return [{type: 'inside', xAxisIndex: 0, filterMode: 'none'},
      {type: 'slider', xAxisIndex: 0, filterMode: 'none', height: 18, bottom: 30}];
  };
  LineChart.prototype.render = function (dt, options) {
    XYChart.prototype.render.call(this, dt, options);
    if (options.explorer) {
      this.grid.bottom = 90;
      this.ec.setOption({grid: this.grid, legend: {bottom: 4}});
      var ec = this.ec;
      this.ec.getZr().on('dblclick', function () { ec.dispatchAction({type: 'dataZoom', start: 0, end: 100}); });
      // The Memory view watches this box's children (a MutationObserver) to re-read the zoomed range from
      // getChartLayoutInterface(): a zoom rewrites this marker, whatever the renderer changed.
      var marker = document.createElement('span');
      marker.style.display = 'none';
      this.container.appendChild(marker);
      this.ec.on('datazoom', function () {
        var z = ec.getOption().dataZoom[0];
        marker.textContent = z.start + '-' + z.end;
      });
    }
  };
  // The bounding box of the plot area (px in the chart's box) and the x value at a pixel: what the Memory
  // view reads after every redraw to filter its table by the zoomed time range.
  Chart.prototype.getChartLayoutInterface = function () {
    var self = this;
    function box() {
      var w = self.ec ? self.ec.getWidth() : 0;
      var h = self.ec ? self.ec.getHeight() : 0;
      var g = self.grid || {left: 0, right: 0, top: 0, bottom: 0};
      function px(v, total) { return typeof v === 'string' ? parseFloat(v) / 100 * total : v; }
      var left = px(g.left, w), top = px(g.top, h);
      return {left: left, top: top, width: w - left - px(g.right, w), height: h - top - px(g.bottom, h)};
    }
    return {
      getChartAreaBoundingBox: box,
      getHAxisValue: function (x) {
        var b = box();
        var v = self.ec ? self.ec.convertFromPixel({xAxisIndex: 0}, x) : NaN;
        if (Array.isArray(v)) v = v[0];
        return typeof v === 'number' ? v : (x - b.left) / (b.width || 1);
      },
      getVAxisValue: function (y) {
        var v = self.ec ? self.ec.convertFromPixel({yAxisIndex: 0}, y) : NaN;
        return Array.isArray(v) ? v[0] : v;
      }
    };
  };

  function ComboChart(container) { XYChart.call(this, 'ComboChart', container); }
  ComboChart.prototype = Object.create(XYChart.prototype);
  ComboChart.prototype.yAxes = function (options) {
    var vAxes = options.vAxes || {};
    var count = Object.keys(vAxes).length > 1 ? 2 : 1;
    var axes = [];
    for (var i = 0; i < count; i++) {
      var v = Object.assign({}, options.vAxis || {}, vAxes[i] || {});
      axes.push(Object.assign(axisStyle(v.title), {type: v.logScale ? 'log' : 'value', nameGap: 56,
        max: axisMax(v.maxValue), splitLine: {show: i === 0, lineStyle: {color: GRID}}}));
    }
    return axes;
  };
  ComboChart.prototype.build = function (dt, options, axis, series) {
    var perSeries = options.series || {};
    var two = Object.keys(options.vAxes || {}).length > 1;
    return series.map(function (s, i) {
      var o = perSeries[i] || {};
      var type = o.type || options.seriesType || 'line';
      var out = {name: s.label, data: points(dt, axis, s.col), yAxisIndex: two ? (o.targetAxisIndex || 0) : 0};
      if (type === 'bars') return Object.assign(out, {type: 'bar', stack: options.isStacked ? 'stack' : undefined});
      if (type === 'line') return Object.assign(out, {type: 'line', symbolSize: 6});
      if (type === 'area') return Object.assign(out, {type: 'line', areaStyle: {opacity: 0.3}});
      if (type === 'steppedArea') return Object.assign(out, {type: 'line', step: 'middle', areaStyle: {opacity: 0.3}});
      throw new Error('series type ' + JSON.stringify(type) + ' is not drawn offline');
    });
  };

  // ---- Timeline ---------------------------------------------------------------------------------------------

  // Rows: [row label, bar label, (tooltip), start, end]. One lane per row label, a coloured bar per row, its
  // label inside the bar where it fits.
  function Timeline(container) { Chart.call(this, 'Timeline', container); }
  Timeline.prototype = Object.create(Chart.prototype);
  Timeline.prototype.render = function (dt, options) {
    var roles = dt.cols.map(function (c) { return c.role || ''; });
    var plain = [];
    var tooltipCol;
    dt.cols.forEach(function (c, i) { if (roles[i] === 'tooltip') tooltipCol = i; else if (!roles[i]) plain.push(i); });
    if (plain.length < 3) throw new Error('a Timeline needs a row label, start and end columns');
    var hasBarLabel = plain.length >= 4;
    var rowCol = plain[0], barCol = hasBarLabel ? plain[1] : null;
    var startCol = plain[plain.length - 2], endCol = plain[plain.length - 1];
    var lanes = [];
    var laneOf = {};
    var showRowLabels = !(options.timeline && options.timeline.showRowLabels === false);
    var colors = this.colors(options);
    var items = dt.rows.map(function (r, i) {
      var lane = textOf(r.c[rowCol], 'string');
      if (!(lane in laneOf)) { laneOf[lane] = lanes.length; lanes.push(lane); }
      return {value: [laneOf[lane], Number(valueOf(r.c[startCol])), Number(valueOf(r.c[endCol]))],
        name: barCol !== null ? textOf(r.c[barCol], 'string') : lane,
        tip: tooltipCol !== undefined ? textOf(r.c[tooltipCol], 'string') : null,
        itemStyle: {color: colors[(showRowLabels ? laneOf[lane] : i) % colors.length]}};
    });
    var height = typeof options.height === 'number' ? options.height : Math.max(120, 42 * lanes.length + 50);
    var ec = this.mount(Object.assign({}, options, {height: height}));
    var laneHeight = Math.max(12, Math.min(40, (height - 40) / Math.max(1, lanes.length)));
    ec.setOption({
      animation: false,
      tooltip: Object.assign(tooltipBox(), {trigger: 'item', formatter: function (p) {
        var d = items[p.dataIndex];
        if (d.tip) return d.tip;
        return '<b>' + escapeHtml(d.name) + '</b><br>' + escapeHtml(formatNumber(d.value[1])) + ' - ' +
          escapeHtml(formatNumber(d.value[2]));
      }}),
      grid: {left: showRowLabels ? 110 : 8, right: 12, top: 6, bottom: 26},
      xAxis: Object.assign(axisStyle(''), {type: 'value', scale: true, splitLine: {lineStyle: {color: '#eee'}}}),
      yAxis: {type: 'category', inverse: true, data: lanes, axisLabel: {show: showRowLabels, fontFamily: FONT},
        axisTick: {show: false}, splitLine: {show: true, lineStyle: {color: '#eee'}}},
      series: [{type: 'custom', encode: {x: [1, 2], y: 0}, data: items, clip: true,
        renderItem: function (params, api) {
          var a = api.coord([api.value(1), api.value(0)]);
          var b = api.coord([api.value(2), api.value(0)]);
          var h = api.size([0, 1])[1] * 0.8;
          var rect = echarts.graphic.clipRectByRect({x: a[0], y: a[1] - h / 2, width: Math.max(1, b[0] - a[0]), height: h},
            {x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height});
          if (!rect) return null;
          var name = items[params.dataIndex].name;
          var children = [{type: 'rect', shape: rect, style: api.style()}];
          if (rect.width > 40) {
            children.push({type: 'text', style: {x: rect.x + 4, y: rect.y + rect.height / 2, text: name,
              width: rect.width - 8, overflow: 'truncate', verticalAlign: 'middle', fill: '#fff',
              font: '11px ' + FONT}});
          }
          return {type: 'group', children: children};
        }}]
    });
    this.laneHeight = laneHeight;
    this.emitClicks();
  };

  // ---- Table ------------------------------------------------------------------------------------------------

  function Table(container) { Chart.call(this, 'Table', container); }
  Table.prototype = Object.create(Chart.prototype);
  Table.prototype.render = function (dt, options) {
    var self = this;
    var order = dt.rows.map(function (_, i) { return i; });
    var sortCol = typeof options.sortColumn === 'number' && options.sortColumn >= 0 ? options.sortColumn : -1;
    var ascending = options.sortAscending !== false;
    var paged = options.page === 'enable';
    var pageSize = options.pageSize || 10;
    var page = 0;
    var wrap = document.createElement('div');
    wrap.className = 'stepscope-table';
    wrap.setAttribute('data-chart', 'Table');
    wrap.style.cssText = 'width:100%;overflow:auto;font:12px ' + FONT + ';color:' + TEXT;
    this.container.appendChild(wrap);

    function sort() {
      if (sortCol < 0) return;
      order.sort(function (a, b) {
        var x = valueOf(dt.rows[a].c[sortCol]), y = valueOf(dt.rows[b].c[sortCol]);
        var d = (x === null || x === undefined) ? -1 : (y === null || y === undefined) ? 1 :
          typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
        return ascending ? d : -d;
      });
    }
    function cell(tag, html, text, css) {
      var el = document.createElement(tag);
      el.style.cssText = 'padding:2px 6px;border:1px solid #eee;' + (css || '');
      if (html !== null) el.innerHTML = html; else el.textContent = text;
      return el;
    }
    function draw() {
      wrap.innerHTML = '';
      var table = document.createElement('table');
      table.style.cssText = 'border-collapse:collapse;width:100%;background:#fff';
      var head = document.createElement('tr');
      head.style.cssText = 'background:linear-gradient(#fff,#e0e0e0);font-weight:bold';
      dt.cols.forEach(function (c, i) {
        if (c.role) return;
        var th = cell('th', null, c.label + (i === sortCol ? (ascending ? ' \u25b2' : ' \u25bc') : ''),
          'cursor:pointer;text-align:center;border-color:#ccc');
        th.addEventListener('click', function () {
          ascending = sortCol === i ? !ascending : true;
          sortCol = i;
          sort();
          page = 0;
          draw();
          events.trigger(self, 'sort', {column: i, ascending: ascending});
        });
        head.appendChild(th);
      });
      table.appendChild(head);
      var from = paged ? page * pageSize : 0;
      var to = paged ? Math.min(order.length, from + pageSize) : order.length;
      for (var k = from; k < to; k++) {
        var r = order[k];
        var tr = document.createElement('tr');
        tr.style.background = (k - from) % 2 ? '#f8f8f8' : '#fff';
        dt.cols.forEach(function (c, i) {
          if (c.role) return;
          var raw = dt.rows[r].c[i];
          var text = textOf(raw, c.type);
          var style = dt.getProperty(r, i, 'style') || '';
          var td = cell('td', options.allowHtml ? text : null, text,
            (c.type === 'number' ? 'text-align:right;' : '') + style);
          var className = dt.getProperty(r, i, 'className');
          if (className) td.className = className;
          tr.appendChild(td);
        });
        table.appendChild(tr);
      }
      wrap.appendChild(table);
      if (paged && order.length > pageSize) {
        var pages = Math.ceil(order.length / pageSize);
        var bar = document.createElement('div');
        bar.style.cssText = 'padding:4px;text-align:center';
        for (var p = 0; p < pages; p++) {
          (function (p) {
            var b = document.createElement('button');
            b.textContent = String(p + 1);
            b.disabled = p === page;
            b.style.cssText = 'margin:0 2px;font:12px ' + FONT;
            b.addEventListener('click', function () { page = p; draw(); events.trigger(self, 'page', {page: p}); });
            bar.appendChild(b);
          })(p);
        }
        wrap.appendChild(bar);
      }
    }
    sort();
    draw();
  };

  // ---- the namespace ----------------------------------------------------------------------------------------

  // A chart type this file does not draw: its box says so (and so does the page's banner).
  function unknownChart(name) {
    function Unknown(container) { Chart.call(this, name, container); }
    Unknown.prototype = Object.create(Chart.prototype);
    Unknown.prototype.render = function () {
      throw new Error('this chart type is not drawn by stepscope\'s offline charts');
    };
    return Unknown;
  }

  var visualization = {
    DataTable: DataTable, arrayToDataTable: arrayToDataTable, events: events,
    PieChart: PieChart, ColumnChart: ColumnChart, SteppedAreaChart: SteppedAreaChart, LineChart: LineChart,
    ComboChart: ComboChart, Table: Table, Timeline: Timeline
  };
  var unknown = {};

  var loaded = Promise.resolve();
  var charts = {
    load: function () { return loaded; },
    setOnLoadCallback: function (fn) { loaded.then(fn); }
  };

  if (typeof echarts === 'undefined') {
    report('the chart library (offline/echarts.min.js) did not load, so no chart can draw');
  }
  window.google = window.google || {};
  window.google.charts = charts;
  window.google.visualization = typeof Proxy === 'function' ? new Proxy(visualization, {
    get: function (target, key) {
      if (key in target || typeof key !== 'string' || !/^[A-Z]/.test(key)) return target[key];
      return unknown[key] = unknown[key] || unknownChart(key);
    }
  }) : visualization;
})();
