package company

// Word lists for Generate. Brand names are a head and a tail glued
// together ("Cobalt" + "ridge"); TestGenerateCombinationsUnique checks that no
// two (head, tail) pairs spell the same brand, which is what keeps slugs and
// domains unique. Changing any list changes the generated data set.

var brandHeads = []string{
	"Amber", "Apex", "Arbor", "Aster", "Azure", "Beacon", "Birch", "Blue",
	"Bold", "Bright", "Cedar", "Cinder", "Clear", "Cobalt", "Copper", "Coral",
	"Crimson", "Crystal", "Dawn", "Delta", "Echo", "Ember", "Falcon", "Fern",
	"Flint", "Fox", "Frost", "Garnet", "Glacier", "Gold", "Granite", "Hazel",
	"Helix", "High", "Indigo", "Iron", "Ivory", "Jade", "Juniper", "Lark",
	"Lumen", "Maple", "Marble", "Meadow", "Mesa", "Mint", "Moss", "Nimbus",
	"Noble", "Nova", "Oak", "Onyx", "Opal", "Orbit", "Pine", "Prism",
	"Quartz", "Quill", "Raven", "Red", "Robin", "Ruby", "Sage", "Sapphire",
	"Scarlet", "Silver", "Slate", "Solar", "Spruce", "Star", "Steel", "Summit",
	"Swift", "Terra", "Thistle", "Timber", "True", "Velvet", "Vista", "Willow",
	"Zephyr", "Alder", "Basalt", "Cypress", "Elm", "Harbor", "Kestrel", "Linden",
	"Magnolia", "Osprey", "Pebble", "Rowan", "Sparrow", "Tundra", "Umber", "Wren",
}

var brandTails = []string{
	"bay", "beam", "bend", "bridge", "brook", "crest", "dale", "field",
	"fire", "ford", "gate", "glen", "grove", "haven", "hill", "hollow",
	"kite", "lake", "light", "line", "link", "loom", "mark", "mill",
	"moor", "path", "peak", "point", "port", "quay", "rise", "rock",
	"shire", "side", "spark", "spire", "spring", "stead", "stone", "stream",
	"tide", "top", "vale", "view", "wave", "well", "wind", "wing",
	"works", "yard", "forge", "gleam", "cove", "reach", "run", "hearth",
}

var nameSuffixes = []string{"", "Group", "Partners", "Holdings", "Collective", "Co"}

type sector struct {
	word        string // the word in the company name
	industry    string
	does        string // "<name> <does>." reads as a sentence
	specialties []string
}

var sectors = []sector{
	{"Logistics", "Transportation, Logistics, Supply Chain and Storage", "moves freight for retailers and manufacturers across three continents",
		[]string{"freight forwarding", "last-mile delivery", "warehouse management", "route optimization", "customs brokerage", "cold chain"}},
	{"Analytics", "IT Services and IT Consulting", "turns operational data into forecasts and dashboards for mid-sized businesses",
		[]string{"business intelligence", "demand forecasting", "data engineering", "data visualization", "machine learning", "data governance"}},
	{"Robotics", "Automation Machinery Manufacturing", "designs robots that automate repetitive work on factory floors",
		[]string{"industrial automation", "machine vision", "autonomous mobile robots", "motion control", "robot integration", "predictive maintenance"}},
	{"Foods", "Food and Beverage Manufacturing", "produces packaged foods sold through grocers across the region",
		[]string{"specialty foods", "organic ingredients", "private label", "food safety", "wholesale distribution", "cold chain"}},
	{"Toys", "Retail", "designs and sells toys and games for children and collectors",
		[]string{"wooden toys", "board games", "model kits", "educational toys", "toy design", "e-commerce"}},
	{"Software", "Software Development", "builds cloud software that small teams use to run their operations",
		[]string{"SaaS", "cloud infrastructure", "API design", "mobile apps", "DevOps", "product design"}},
	{"Systems", "IT Services and IT Consulting", "designs, installs and runs IT systems for public and private organizations",
		[]string{"systems integration", "managed services", "network security", "cloud migration", "help desk", "identity management"}},
	{"Labs", "Research Services", "runs applied research programs for industry partners",
		[]string{"applied research", "prototyping", "materials testing", "technology transfer", "grant programs", "lab automation"}},
	{"Health", "Hospitals and Health Care", "operates outpatient clinics and telehealth services",
		[]string{"primary care", "telehealth", "care coordination", "patient experience", "preventive care", "digital health"}},
	{"Biosciences", "Biotechnology Research", "develops diagnostic assays and biologic therapies",
		[]string{"drug discovery", "diagnostics", "genomics", "clinical trials", "bioprocessing", "protein engineering"}},
	{"Energy", "Renewable Energy Power Generation", "develops and operates wind and solar projects",
		[]string{"solar farms", "wind power", "energy storage", "grid integration", "power purchase agreements", "asset management"}},
	{"Capital", "Financial Services", "invests in growth-stage companies and manages private funds",
		[]string{"venture capital", "private equity", "growth equity", "fund administration", "portfolio support", "due diligence"}},
	{"Insurance", "Insurance", "writes commercial and personal insurance policies",
		[]string{"commercial lines", "claims handling", "risk assessment", "underwriting", "reinsurance", "broker relations"}},
	{"Architects", "Architecture and Planning", "designs public buildings, housing and workplaces",
		[]string{"sustainable design", "urban planning", "interior architecture", "BIM", "adaptive reuse", "landscape design"}},
	{"Construction", "Construction", "builds commercial and residential projects from groundwork to handover",
		[]string{"general contracting", "design-build", "project management", "civil works", "renovation", "site safety"}},
	{"Media", "Media Production", "produces documentaries, podcasts and branded video",
		[]string{"video production", "podcasting", "post-production", "documentary film", "motion graphics", "content strategy"}},
	{"Studios", "Computer Games", "makes independent games for consoles and PC",
		[]string{"game design", "3D art", "level design", "multiplayer", "game audio", "live operations"}},
	{"Marketing", "Advertising Services", "plans and runs marketing campaigns for consumer brands",
		[]string{"brand strategy", "performance marketing", "social media", "content marketing", "SEO", "market research"}},
	{"Consulting", "Business Consulting and Services", "advises executives on strategy, operations and change",
		[]string{"strategy", "operations", "change management", "organizational design", "due diligence", "process improvement"}},
	{"Legal", "Law Practice", "advises companies on contracts, disputes and compliance",
		[]string{"corporate law", "commercial contracts", "litigation", "employment law", "intellectual property", "regulatory compliance"}},
	{"Foundry", "Industrial Machinery Manufacturing", "casts and machines precision metal parts",
		[]string{"precision machining", "metal casting", "CNC", "quality assurance", "prototyping", "supply chain"}},
	{"Textiles", "Textile Manufacturing", "weaves and finishes technical fabrics for apparel and industry",
		[]string{"technical textiles", "sustainable fibers", "dyeing and finishing", "knitwear", "textile recycling", "product development"}},
	{"Outfitters", "Retail Apparel and Fashion", "sells outdoor clothing and gear online and in its own stores",
		[]string{"outdoor apparel", "e-commerce", "retail stores", "product design", "repair services", "sustainability"}},
	{"Farms", "Farming", "grows fruit and vegetables for regional markets",
		[]string{"organic farming", "greenhouse production", "regenerative agriculture", "farm-to-table", "irrigation", "agritourism"}},
	{"Mobility", "Transportation, Logistics, Supply Chain and Storage", "runs shared electric bikes and scooters in city centers",
		[]string{"micromobility", "fleet operations", "electric vehicles", "urban transport", "mobility data", "charging infrastructure"}},
	{"Aerospace", "Aviation and Aerospace Component Manufacturing", "makes components for small satellites and aircraft",
		[]string{"satellite components", "composites", "avionics", "flight testing", "precision manufacturing", "systems engineering"}},
	{"Security", "Computer and Network Security", "protects companies from cyber attacks and data breaches",
		[]string{"penetration testing", "incident response", "threat intelligence", "security operations", "cloud security", "compliance audits"}},
	{"Learning", "E-Learning Providers", "runs online courses and training programs for professionals",
		[]string{"online courses", "corporate training", "certification", "learning platforms", "instructional design", "coaching"}},
	{"Realty", "Real Estate", "buys, leases and manages office and residential property",
		[]string{"property management", "commercial leasing", "residential sales", "valuation", "facility management", "real estate investment"}},
	{"Hospitality", "Hospitality", "runs boutique hotels and event venues",
		[]string{"boutique hotels", "event venues", "guest experience", "food and beverage", "revenue management", "conferences"}},
	{"Travel", "Travel Arrangements", "plans group tours and business travel",
		[]string{"group tours", "business travel", "travel technology", "destination management", "adventure travel", "events"}},
	{"Pharma", "Pharmaceutical Manufacturing", "manufactures generic medicines and over-the-counter products",
		[]string{"generic medicines", "regulatory affairs", "quality control", "formulation", "pharmacovigilance", "contract manufacturing"}},
	{"Telecom", "Telecommunications", "builds and operates fiber networks for homes and businesses",
		[]string{"fiber broadband", "network operations", "VoIP", "data centers", "wireless networks", "managed connectivity"}},
	{"Design", "Design Services", "designs products, brands and digital experiences",
		[]string{"industrial design", "brand identity", "UX design", "packaging design", "service design", "prototyping"}},
	{"Payments", "Financial Services", "processes card and bank payments for online merchants",
		[]string{"payment processing", "fraud prevention", "merchant services", "open banking", "billing", "payouts"}},
	{"Water", "Utilities", "treats and supplies water for towns and industry",
		[]string{"water treatment", "desalination", "leak detection", "wastewater", "water reuse", "utility operations"}},
}

type city struct{ name, region, country string }

var cities = []city{
	{"Seattle", "Washington", "United States"}, {"Austin", "Texas", "United States"},
	{"Denver", "Colorado", "United States"}, {"Boston", "Massachusetts", "United States"},
	{"Chicago", "Illinois", "United States"}, {"Portland", "Oregon", "United States"},
	{"Atlanta", "Georgia", "United States"}, {"Minneapolis", "Minnesota", "United States"},
	{"Raleigh", "North Carolina", "United States"}, {"San Diego", "California", "United States"},
	{"Pittsburgh", "Pennsylvania", "United States"}, {"Nashville", "Tennessee", "United States"},
	{"Toronto", "Ontario", "Canada"}, {"Vancouver", "British Columbia", "Canada"},
	{"Montreal", "Quebec", "Canada"}, {"Mexico City", "Mexico City", "Mexico"},
	{"Bristol", "England", "United Kingdom"}, {"Manchester", "England", "United Kingdom"},
	{"Edinburgh", "Scotland", "United Kingdom"}, {"Dublin", "Leinster", "Ireland"},
	{"Munich", "Bavaria", "Germany"}, {"Hamburg", "Hamburg", "Germany"},
	{"Leipzig", "Saxony", "Germany"}, {"Lyon", "Auvergne-Rhône-Alpes", "France"},
	{"Nantes", "Pays de la Loire", "France"}, {"Rotterdam", "South Holland", "Netherlands"},
	{"Utrecht", "Utrecht", "Netherlands"}, {"Antwerp", "Flanders", "Belgium"},
	{"Porto", "Porto", "Portugal"}, {"Valencia", "Valencian Community", "Spain"},
	{"Bilbao", "Basque Country", "Spain"}, {"Turin", "Piedmont", "Italy"},
	{"Bologna", "Emilia-Romagna", "Italy"}, {"Zurich", "Zurich", "Switzerland"},
	{"Graz", "Styria", "Austria"}, {"Aarhus", "Central Denmark", "Denmark"},
	{"Gothenburg", "Västra Götaland", "Sweden"}, {"Tampere", "Pirkanmaa", "Finland"},
	{"Bergen", "Vestland", "Norway"}, {"Kraków", "Lesser Poland", "Poland"},
	{"Brno", "South Moravia", "Czechia"}, {"Tallinn", "Harju", "Estonia"},
	{"Cape Town", "Western Cape", "South Africa"}, {"Nairobi", "Nairobi County", "Kenya"},
	{"Lagos", "Lagos State", "Nigeria"}, {"Bangalore", "Karnataka", "India"},
	{"Pune", "Maharashtra", "India"}, {"Singapore", "Singapore", "Singapore"},
	{"Osaka", "Osaka", "Japan"}, {"Busan", "Busan", "South Korea"},
	{"Melbourne", "Victoria", "Australia"}, {"Brisbane", "Queensland", "Australia"},
	{"Auckland", "Auckland", "New Zealand"}, {"São Paulo", "São Paulo", "Brazil"},
	{"Córdoba", "Córdoba", "Argentina"}, {"Santiago", "Santiago Metropolitan", "Chile"},
}

var companyTypes = []weighted{
	{"Privately Held", 60}, {"Public Company", 8}, {"Partnership", 8}, {"Self-Owned", 6},
	{"Nonprofit", 6}, {"Sole Proprietorship", 5}, {"Educational", 3}, {"Government Agency", 4},
}

var sizeBands = []sizeBand{
	{"2-10", 2, 10, 28}, {"11-50", 11, 50, 30}, {"51-200", 51, 200, 20}, {"201-500", 201, 500, 10},
	{"501-1000", 501, 1000, 5}, {"1001-5000", 1001, 5000, 4}, {"5001-10000", 5001, 10000, 2},
	{"10001+", 10001, 0, 1},
}

var closingLines = []string{
	"It works with customers of every size.",
	"The team values long-term partnerships.",
	"It is known for careful, dependable work.",
	"It has grown steadily through referrals.",
}
